//! The rules, in one table. Each looks at the [`Evidence`] and, when its cause shows, says how
//! much of the step it takes, what was measured and what to change. A rule of a lower tier
//! wins over any of a higher one; within a tier the largest share wins. A straggler comes
//! first because the others' wait for it shows up in their allreduce; throttling next, since it
//! explains a slow compute; then the phases of the step, each over its threshold; memory near
//! the limit; a GPU left idle by the host; and compute, the good case, when nothing else shows.

use super::{pct, Cause, Evidence, Finding};
use crate::data::Loader;
use crate::device::DeviceId;
use crate::model::Precision;
use crate::record::straggler;
use crate::record::text::thousands;
use crate::settings::DistBackend;

/// One row of the table.
pub struct Rule {
    pub cause: Cause,
    /// Lower tiers win.
    pub tier: u8,
    pub find: fn(&Evidence) -> Option<Finding>,
}

/// Every rule, by tier.
pub const RULES: &[Rule] = &[
    Rule { cause: Cause::Straggler, tier: 0, find: straggler },
    Rule { cause: Cause::Throttled, tier: 1, find: throttled },
    Rule { cause: Cause::Input, tier: 2, find: input },
    Rule { cause: Cause::Communication, tier: 2, find: communication },
    Rule { cause: Cause::Host, tier: 2, find: update },
    Rule { cause: Cause::Memory, tier: 3, find: memory },
    Rule { cause: Cause::Host, tier: 4, find: idle_gpu },
    Rule { cause: Cause::Compute, tier: 5, find: compute },
];

/// The share of the step the others must lose waiting for a straggler before it is named.
pub const STRAGGLER_WAIT: f64 = 0.10;
/// The share of the step a phase must take to limit it.
pub const PHASE_SHARE: f64 = 0.20;
/// The share of a device's memory in use that counts as full.
pub const MEMORY_FULL: f64 = 0.95;
/// GPU utilization under which a step spent in forward and backward is held back by the host.
pub const GPU_IDLE_UTIL: f64 = 60.0;
/// NVML's throttle reasons that slow a busy GPU (the power cap is a loaded GPU's normal state).
pub const SLOWING: [&str; 4] = ["HW slowdown", "thermal (SW)", "thermal (HW)", "power brake (HW)"];

fn slowing_reasons(e: &Evidence, replica: usize) -> Vec<String> {
    let reasons = e.replica_sample(replica).and_then(|s| s.gpu.as_ref()).and_then(|g| g.throttle.clone());
    reasons.into_iter().flatten().filter(|r| SLOWING.contains(&r.as_str())).collect()
}

/// The replica (one process) or rank (several) slowest in forward and backward, when it is
/// slower than the others by [`straggler::slowest`] and they wait for it [`STRAGGLER_WAIT`] of
/// the step or more. Compute alone is compared: a replica that waits longer for its batch is
/// fed last, not slow.
fn straggler(e: &Evidence) -> Option<Finding> {
    let ranks = e.ranks() > 1;
    let times = if ranks { e.rank_compute() } else { e.replica_compute() };
    let (worst, typical) = straggler::slowest(&times)?;
    let wait = e.share(times[worst] - typical);
    if wait < STRAGGLER_WAIT {
        return None;
    }
    if ranks {
        let than = match times.len() {
            2 => format!("rank {}", usize::from(worst == 0)),
            _ => "the other ranks' median".to_owned(),
        };
        let host = e.info.world.as_ref().and_then(|w| w.hosts.get(worst)).map_or("its host", String::as_str);
        return Some(Finding {
            share: wait,
            finding: format!(
                "{} computes {:.1}x longer than {than}; the other ranks wait for it {} of the step",
                e.rank_name(worst),
                times[worst] / typical,
                pct(wait)
            ),
            advice: format!(
                "see what else runs on {host} (its cores or GPU are shared: dpt-tui doctor there), or leave rank {worst} out"
            ),
        });
    }
    let reasons = slowing_reasons(e, worst);
    let throttled =
        if reasons.is_empty() { String::new() } else { format!(", throttled ({})", reasons.join(", ")) };
    let name = e.replica_name(worst);
    let than = match times.len() {
        2 => e.replica_name(usize::from(worst == 0)),
        _ => "the others' median".to_owned(),
    };
    Some(Finding {
        share: wait,
        finding: format!(
            "{name} is {:.0}% slower than {than}{throttled}; the other replicas wait for it {} of the step",
            (times[worst] / typical - 1.0) * 100.0,
            pct(wait)
        ),
        advice: if e.on_gpu() {
            format!("see what else runs on {name} (dpt-tui doctor), or leave it out of --devices")
        } else {
            "the replicas share the cores unevenly: set --cpu-threads so they divide the cores, or run fewer replicas"
                .to_owned()
        },
    })
}

/// GPUs whose clocks are held down by heat, a power brake or a hardware slowdown.
fn throttled(e: &Evidence) -> Option<Finding> {
    let held: Vec<_> = e
        .gpus()
        .filter_map(|s| {
            let reasons: Vec<&str> =
                s.gpu.as_ref()?.slowing().into_iter().filter(|r| SLOWING.contains(r)).collect();
            (!reasons.is_empty()).then_some((s, reasons))
        })
        .collect();
    let (first, reasons) = held.first()?;
    let names: Vec<String> = held
        .iter()
        .map(|(s, _)| match s.rank {
            Some(r) => format!("rank {r} {}", s.device),
            None => s.device.to_string(),
        })
        .collect();
    let clock =
        first.gpu.as_ref().and_then(|g| g.sm_clock_mhz).map_or(String::new(), |m| format!(" at {m} MHz"));
    let compute = e.share(e.step.timing.compute);
    Some(Finding {
        share: compute,
        finding: format!(
            "{} held down ({}){clock} while forward and backward take {} of the step",
            names.join(", "),
            reasons.join(", "),
            pct(compute)
        ),
        advice: "check its cooling and power supply (nvidia-smi -q -d PERFORMANCE says why)".to_owned(),
    })
}

/// The replicas wait for their batches.
fn input(e: &Evidence) -> Option<Finding> {
    let share = e.share(e.step.timing.data);
    if share < PHASE_SHARE {
        return None;
    }
    let s = &e.info.settings;
    let (detail, advice) = match e.step.loader {
        Some(l) => (
            format!(
                " (loader {:.1}/{} ready, {} img/s{})",
                l.ready,
                l.depth,
                thousands(l.images_per_sec.round() as i64),
                l.threads.map_or(String::new(), |t| format!(
                    " on {t} decode thread{}",
                    if t == 1 { "" } else { "s" }
                ))
            ),
            match l.ready < 0.5 {
                true => "raise --decode-threads or store the images smaller".to_owned(),
                // The loader keeps up: the wait is the copy to the device and augmentation.
                false => "the batches are ready: lighten --augment or move less per batch (smaller images)".to_owned(),
            },
        ),
        None if s.recipe.augment.is_some() => {
            (String::new(), "augmenting the batch takes it: a lighter --augment".to_owned())
        }
        None if s.placement.loader == Loader::Stream => {
            (String::new(), "raise --decode-threads or store the images smaller".to_owned())
        }
        None => (
            String::new(),
            "gathering each batch costs more than the model's work on it: a larger model or --batch-size per replica"
                .to_owned(),
        ),
    };
    Some(Finding {
        share,
        finding: format!("replicas wait for data {} of the step{detail}", pct(share)),
        advice,
    })
}

/// The gradients' sum over the replicas and processes.
fn communication(e: &Evidence) -> Option<Finding> {
    let share = e.share(e.step.timing.allreduce);
    if share < PHASE_SHARE {
        return None;
    }
    let placement = &e.info.settings.placement;
    let over = match &e.info.world {
        Some(w) => format!("over {} across {} ranks", backend_name(&w.backend), w.replicas.len()),
        None if e.info.allreduce.is_empty() => "in this process".to_owned(),
        None => format!("({})", e.info.allreduce),
    };
    let per_host = e.info.world.as_ref().map_or(1, |w| {
        let mut hosts = w.hosts.clone();
        hosts.sort();
        hosts.dedup();
        w.hosts.len().div_ceil(hosts.len().max(1))
    });
    let gloo_on_gpus = e.on_gpu() && e.info.world.as_ref().is_some_and(|w| w.backend == "gloo");
    let advice = if gloo_on_gpus && placement.dist_backend != DistBackend::Gloo {
        "use NCCL (--dist-backend nccl): Gloo copies every gradient through the host".to_owned()
    } else if gloo_on_gpus {
        "--dist-backend gloo sends GPU gradients through the host: use nccl".to_owned()
    } else if per_host > 1 {
        format!("{per_host} processes per host sum over the network stack: run fewer processes per host, each with more replicas")
    } else if placement.bucket_cap_mb == 0.0 {
        "reduce in buckets (--bucket-cap-mb 25) so the sum overlaps the backward pass".to_owned()
    } else if e.step.overlapped.is_some_and(|o| o < 0.5) {
        format!("a larger --bucket-cap-mb (now {}) sends fewer, larger messages", placement.bucket_cap_mb)
    } else {
        "sum less often: --accumulate N reduces once per N micro-batches".to_owned()
    };
    let mut finding = format!("the allreduce takes {} of the step {over}", pct(share));
    let mut advice = advice;
    if let Some((reached, measured)) = bus_against_doctor(e) {
        finding += &format!(
            " at {reached:.0} GB/s bus bandwidth, against {:.0} GB/s doctor measured on these GPUs",
            measured.gbs
        );
        if reached >= BUS_NEAR_LIMIT * measured.gbs {
            advice = "the GPUs' link is the limit: sum less often with --accumulate N, or train a larger batch per step".to_owned();
        }
    }
    if let Some(pcie) = pcie_text(e) {
        finding += &format!(" ({pcie})");
    }
    Some(Finding { share, finding, advice })
}

/// The share of doctor's measured bus bandwidth from which the link, not the way the
/// gradients are sent, limits the allreduce.
pub const BUS_NEAR_LIMIT: f64 = 0.7;

/// The bus bandwidth this process's allreduce reaches (its fp32 gradients over its GPUs, in
/// the step's allreduce time), beside the one doctor measured on the same GPUs; one process
/// on several GPUs only (doctor measures them in one process).
fn bus_against_doctor(e: &Evidence) -> Option<(f64, super::MeasuredBus)> {
    let measured = e.info.bus_bandwidth?;
    let mut gpus: Vec<&DeviceId> = e.info.devices.iter().filter(|d| matches!(d, DeviceId::Cuda(_))).collect();
    gpus.sort_by_key(|d| d.to_string());
    gpus.dedup();
    if e.info.world.is_some() || gpus.len() < 2 || e.step.timing.allreduce <= 0.0 {
        return None;
    }
    let bytes = e.info.param_count as f64 * 4.0;
    Some((super::bus_gbs(bytes, gpus.len(), e.step.timing.allreduce), measured))
}

/// The PCIe traffic of the first replica's GPU in its latest reading, in words.
fn pcie_text(e: &Evidence) -> Option<String> {
    let gpu = e.replica_sample(0)?.gpu.as_ref()?;
    let (tx, rx) = (gpu.pcie_tx_kbs?, gpu.pcie_rx_kbs?);
    Some(format!(
        "PCIe {:.1} GB/s out, {:.1} GB/s in on {}",
        f64::from(tx) / 1e6,
        f64::from(rx) / 1e6,
        e.replica_name(0)
    ))
}

fn backend_name(backend: &str) -> String {
    match backend {
        "gloo" => "Gloo".to_owned(),
        "nccl" => "NCCL".to_owned(),
        other => other.to_owned(),
    }
}

/// The coordinator's update of every replica.
fn update(e: &Evidence) -> Option<Finding> {
    let share = e.share(e.step.timing.update);
    if share < PHASE_SHARE {
        return None;
    }
    let replicas = e.step.replicas.len() / e.ranks().max(1);
    let advice = match replicas {
        0 | 1 => "the update is fixed per step: a larger --batch-size spreads it over more samples".to_owned(),
        n => format!(
            "each process updates its {n} replicas in turn: fewer replicas per process (more processes, dpt-tui launch)"
        ),
    };
    Some(Finding { share, finding: format!("the update takes {} of the step", pct(share)), advice })
}

/// A device with nearly all its memory in use.
fn memory(e: &Evidence) -> Option<Finding> {
    let (sample, share) = e
        .devices
        .iter()
        .filter_map(|s| Some((s, s.mem_used? as f64 / s.mem_total.filter(|t| *t > 0)? as f64)))
        .max_by(|a, b| a.1.total_cmp(&b.1))?;
    if share < MEMORY_FULL {
        return None;
    }
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    let (used, total) = (gib(sample.mem_used?), gib(sample.mem_total?));
    let (what, advice) = match sample.source {
        crate::monitor::SampleSource::Nvml => (
            format!("{} holds {used:.1} of {total:.1} GiB", sample.device),
            "near the limit the allocator frees and retries: a smaller --batch-size with --accumulate keeps the batch, or --precision bf16",
        ),
        _ => (
            format!("the process holds {used:.1} of the host's {total:.1} GiB"),
            "the host may swap: a smaller --data-memory, or --loader stream",
        ),
    };
    Some(Finding { share, finding: format!("{what} ({})", pct(share)), advice: advice.to_owned() })
}

/// GPUs left idle while the step is spent in forward and backward: the host launches kernels
/// too slowly (a small model or batch).
fn idle_gpu(e: &Evidence) -> Option<Finding> {
    let utils: Vec<f64> = e.gpus().filter_map(|s| s.util_pct).collect();
    let compute = e.share(e.step.timing.compute);
    if utils.is_empty() || compute < 0.5 {
        return None;
    }
    let util = utils.iter().sum::<f64>() / utils.len() as f64;
    if util >= GPU_IDLE_UTIL {
        return None;
    }
    Some(Finding {
        share: 1.0 - util / 100.0,
        finding: format!("GPUs {util:.0}% busy while forward and backward take {} of the step", pct(compute)),
        advice: "its kernels are too small to keep a GPU busy: a larger --batch-size per GPU".to_owned(),
    })
}

/// The good case: forward and backward take the step.
fn compute(e: &Evidence) -> Option<Finding> {
    let share = e.share(e.step.timing.compute);
    let utils: Vec<f64> = e.gpus().filter_map(|s| s.util_pct).collect();
    let busy = match utils.len() {
        0 => String::new(),
        n => format!(
            ", GPU{} {:.0}% busy",
            if n == 1 { "" } else { "s" },
            utils.iter().sum::<f64>() / n as f64
        ),
    };
    let advice = match (e.on_gpu(), e.info.settings.precision.format) {
        (true, Precision::F32) => "the good case; --precision bf16 does more per second on GPUs that have it",
        _ => "the good case: the devices are the limit",
    };
    Some(Finding {
        share,
        finding: format!("{} of the step in forward and backward{busy}", pct(share)),
        advice: advice.to_owned(),
    })
}
