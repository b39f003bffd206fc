//! What the bench found, as the three outputs: a table on stdout (a row as each case ends),
//! `bench.json` with every figure, and `bench.md`, the same table in Markdown with the machine
//! it was measured on, ready for BENCHMARKS.md.

use serde::Serialize;

use super::child::{RunFigures, TorchFigures};
use super::plan::Case;
use dpt_tui::flops::{rate_label, ModelFlops, PeakFlops};

/// How a side of a case went.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    /// This build or machine cannot run it (dpt-tui refused it as bad input, or it needs what
    /// is not there: a Python, two GPUs).
    Unsupported,
    Failed,
    TimedOut,
    /// The bench was stopped (SIGINT, SIGTERM) while it ran: what it had is kept.
    Interrupted,
}

impl Status {
    pub fn word(&self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Unsupported => "unsupported",
            Status::Failed => "failed",
            Status::TimedOut => "timed out",
            Status::Interrupted => "interrupted",
        }
    }
}

/// One side of a case: how it went, why not, and its figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side<F> {
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub figures: Option<F>,
}

impl<F> Side<F> {
    pub fn ok(figures: F) -> Self {
        Side { status: Status::Ok, reason: None, figures: Some(figures) }
    }

    /// A side that gave no figures (unsupported, failed, timed out, stopped), and why.
    pub fn unmeasured(status: Status, reason: impl Into<String>) -> Self {
        Side { status, reason: Some(reason.into()), figures: None }
    }

    fn cell(&self, ok: impl FnOnce(&F) -> String) -> String {
        match (&self.status, &self.figures) {
            (Status::Ok, Some(f)) => ok(f),
            (s, _) => s.word().to_owned(),
        }
    }
}

/// One case's result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CaseResult {
    pub case: String,
    /// The model in words (`resnet18`, `gpt 12x768, block 1024`).
    pub model: String,
    pub devices: String,
    pub precision: String,
    /// Samples (windows) per step over all replicas.
    pub batch: usize,
    /// Steps timed after the warm-up.
    pub steps: usize,
    /// Tokens per sample (a GPT's block; 1 otherwise): the table's throughput is in tokens/s.
    pub tokens_per_sample: usize,
    pub dpt_tui: Side<RunFigures>,
    /// PyTorch's loop (a GPT's: over the eager module).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pytorch: Option<Side<TorchFigures>>,
    /// A GPT's second reference: PyTorch's loop over the TorchScript file dpt-tui trains, run
    /// by the TorchScript interpreter as dpt-tui runs it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pytorch_script: Option<Side<TorchFigures>>,
    /// dpt-tui's throughput over PyTorch's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// dpt-tui's throughput over the TorchScript file's loop.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub script_ratio: Option<f64>,
    /// Model FLOP/s of each side (dpt-tui's count of the model's FLOPs, 3 per sample's forward).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_flops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pytorch_model_flops: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mfu: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pytorch_mfu: Option<f64>,
    /// dpt-tui's count of a sample's forward FLOPs over FlopCounterMode's on the PyTorch side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flops_vs_flop_counter: Option<f64>,
    /// NCCL's allreduce across the GPUs: bus bandwidth, GB/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus_gbs: Option<f64>,
    /// What the case's GPUs can do at most in its precision (GPUs of the peak table).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak: Option<PeakFlops>,
    /// What the case did differently from what was asked (synthetic tokens for given ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl CaseResult {
    /// A case not yet run.
    pub fn new(case: &Case, model: String, devices: String, precision: String) -> Self {
        CaseResult {
            case: case.name.to_owned(),
            model,
            devices,
            precision,
            batch: case.batch,
            steps: case.steps,
            tokens_per_sample: case.gpt().map_or(1, |g| g.block),
            dpt_tui: Side::unmeasured(Status::Unsupported, "not run"),
            pytorch: None,
            pytorch_script: None,
            script_ratio: None,
            ratio: None,
            model_flops: None,
            pytorch_model_flops: None,
            mfu: None,
            pytorch_mfu: None,
            flops_vs_flop_counter: None,
            bus_gbs: None,
            peak: None,
            note: None,
        }
    }

    /// Fills the ratio and the FLOP figures from both sides' figures: the model's FLOPs as
    /// dpt-tui counted them (FlopCounterMode's on the PyTorch side when dpt-tui did not run).
    pub fn fill_derived_figures(&mut self) {
        let ours = self.dpt_tui.figures.as_ref();
        let theirs = self.pytorch.as_ref().and_then(|p| p.figures.as_ref());
        let over = |t: &TorchFigures| {
            ours.filter(|_| t.samples_per_sec > 0.0).map(|o| o.samples_per_sec / t.samples_per_sec)
        };
        self.ratio = theirs.and_then(over);
        self.script_ratio = self.pytorch_script.as_ref().and_then(|p| p.figures.as_ref()).and_then(over);
        let counted = ours.and_then(|o| o.flops_per_sample);
        let flop_counter = theirs.and_then(|t| t.flops_per_sample).filter(|&c| c > 0.0);
        if let (Some(f), Some(c)) = (counted, flop_counter) {
            self.flops_vs_flop_counter = Some(f / c);
        }
        let Some(f) = counted.or(flop_counter) else { return };
        let flops = ModelFlops { forward_per_sample: f };
        let share =
            |samples_per_sec: f64| self.peak.as_ref().and_then(|p| flops.utilisation(samples_per_sec, p));
        if let Some(o) = ours {
            (self.model_flops, self.mfu) =
                (Some(flops.achieved(o.samples_per_sec)), share(o.samples_per_sec));
        }
        if let Some(t) = theirs {
            (self.pytorch_model_flops, self.pytorch_mfu) =
                (Some(flops.achieved(t.samples_per_sec)), share(t.samples_per_sec));
        }
    }

    /// Whether a side failed or ran out of time (an unsupported side is not a failure).
    pub fn failed(&self) -> bool {
        let bad = |s: &Status| matches!(s, Status::Failed | Status::TimedOut);
        let torch = [&self.pytorch, &self.pytorch_script];
        bad(&self.dpt_tui.status) || torch.iter().any(|p| p.as_ref().is_some_and(|p| bad(&p.status)))
    }

    fn unit(&self) -> &'static str {
        if self.tokens_per_sample > 1 {
            "tokens/s"
        } else {
            "samples/s"
        }
    }

    /// The table's cells: case, device, precision, batch, dpt-tui, ms/step (split), peak
    /// memory, MFU, PyTorch, ratio, and a GPT's TorchScript loop and ratio.
    fn cells(&self) -> [String; 12] {
        let per = self.tokens_per_sample as f64;
        let rate = |s: f64| format!("{} {}", thousands(s * per), self.unit());
        let dpt = match (&self.bus_gbs, &self.dpt_tui.status) {
            (Some(b), Status::Ok) => format!("{b:.0} GB/s bus"),
            _ => self.dpt_tui.cell(|f| rate(f.samples_per_sec)),
        };
        let split = self.dpt_tui.cell(|f| {
            format!(
                "{:.1} = {:.1} + {:.1} + {:.1} + {:.1}",
                f.ms_per_step, f.data_ms, f.compute_ms, f.allreduce_ms, f.update_ms
            )
        });
        let ours = self.dpt_tui.figures.as_ref().and_then(|f| f.peak_mib);
        let theirs = self.pytorch.as_ref().and_then(|p| p.figures.as_ref()).and_then(|f| f.peak_mib);
        let memory = match (ours, theirs) {
            (Some(o), Some(t)) => format!("{} / {} MiB", thousands(o), thousands(t)),
            (Some(o), None) => format!("{} MiB / -", thousands(o)),
            (None, Some(t)) => format!("- / {} MiB", thousands(t)),
            (None, None) => "-".to_owned(),
        };
        let mfu = match (self.model_flops, self.mfu) {
            (Some(flops), Some(u)) => format!("{:.1}% ({})", u * 100.0, rate_label(flops)),
            (Some(flops), None) => rate_label(flops),
            _ => "-".to_owned(),
        };
        let torch = |side: &Option<Side<TorchFigures>>| match side {
            Some(p) => p.cell(|f| rate(f.samples_per_sec)),
            None => "-".to_owned(),
        };
        let ratio = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x"));
        let batch = if self.bus_gbs.is_some() { "-".to_owned() } else { self.batch.to_string() };
        [
            self.case.clone(),
            self.devices.clone(),
            self.precision.clone(),
            batch,
            dpt,
            split,
            memory,
            mfu,
            torch(&self.pytorch),
            ratio(self.ratio),
            torch(&self.pytorch_script),
            ratio(self.script_ratio),
        ]
    }

    /// Why a side did not run or failed, one line each.
    fn notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self.note.iter().map(|n| format!("{}: {n}", self.case)).collect();
        if let Some(r) = &self.dpt_tui.reason {
            notes.push(format!("{} dpt-tui {}: {r}", self.case, self.dpt_tui.status.word()));
        }
        if let Some(Side { status, reason: Some(r), .. }) = &self.pytorch {
            notes.push(format!("{} PyTorch {}: {r}", self.case, status.word()));
        }
        if let Some(Side { status, reason: Some(r), .. }) = &self.pytorch_script {
            notes.push(format!("{} PyTorch (TorchScript) {}: {r}", self.case, status.word()));
        }
        notes
    }
}

/// `12,345` from 12345.4.
fn thousands(x: f64) -> String {
    dpt_tui::record::text::thousands(x.round() as i64)
}

const HEADERS: [&str; 12] = [
    "case",
    "devices",
    "precision",
    "batch",
    "dpt-tui",
    "ms/step = data + fwd/bwd + allreduce + update",
    "peak memory (dpt-tui / PyTorch)",
    "MFU (model FLOP/s)",
    "PyTorch",
    "dpt-tui / PyTorch",
    "PyTorch (TorchScript)",
    "dpt-tui / TorchScript",
];

/// The machine and software a bench ran on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    pub dpt_tui: String,
    /// The libtorch this binary loads.
    pub torch: String,
    /// The PyTorch side's torch, when there is one.
    pub python_torch: Option<String>,
    pub host: String,
    pub cpu_cores: usize,
    pub nvidia_driver: Option<String>,
    /// `cuda:0 NVIDIA H100 80GB HBM3, 79.2 GiB` or `cpu`.
    pub devices: Vec<String>,
    /// The date (UTC) it ran.
    pub date: String,
}

/// The whole bench.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub machine: Machine,
    pub budget_s: f64,
    pub elapsed_s: f64,
    pub cases: Vec<CaseResult>,
    /// The signal that stopped the bench before its last case (`SIGINT`); the cases not begun
    /// are not in `cases`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
}

/// Pads each column to its widest cell.
fn aligned<const N: usize>(rows: &[[String; N]]) -> Vec<String> {
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..N).map(width).collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
            cells.join("  ").trim_end().to_owned()
        })
        .collect()
}

impl Report {
    /// The stdout table: a header and a row per case, columns aligned.
    pub fn table(&self) -> String {
        let mut rows = vec![HEADERS.map(str::to_owned)];
        rows.extend(self.cases.iter().map(CaseResult::cells));
        let mut lines = aligned(&rows);
        lines.extend(self.cases.iter().flat_map(CaseResult::notes));
        lines.extend(self.interrupted_note());
        lines.join("\n")
    }

    /// What a stopped bench says under its table.
    fn interrupted_note(&self) -> Option<String> {
        self.interrupted.as_ref().map(|signal| {
            format!("interrupted by {signal} after {} case(s); the others did not run", self.cases.len())
        })
    }

    /// `bench.md`: the machine, then the table and the notes in Markdown.
    pub fn markdown(&self) -> String {
        let m = &self.machine;
        let mut out = format!(
            "### dpt-tui bench on {}, {}\n\n- dpt-tui {}, torch {} (PyTorch side: {})\n- {} CPU cores{}\n- devices: {}\n- budget {:.0} s, took {:.0} s\n\n",
            m.host,
            m.date,
            m.dpt_tui,
            m.torch,
            m.python_torch.as_deref().unwrap_or("none"),
            m.cpu_cores,
            m.nvidia_driver.as_ref().map_or(String::new(), |d| format!(", NVIDIA driver {d}")),
            m.devices.join("; "),
            self.budget_s,
            self.elapsed_s,
        );
        out += &format!("| {} |\n|{}\n", HEADERS.join(" | "), " --- |".repeat(HEADERS.len()));
        for c in &self.cases {
            out += &format!("| {} |\n", c.cells().join(" | "));
        }
        let mut notes: Vec<String> = self.cases.iter().flat_map(CaseResult::notes).collect();
        notes.extend(self.interrupted_note());
        if !notes.is_empty() {
            out += "\n";
            for n in notes {
                out += &format!("- {n}\n");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests;
