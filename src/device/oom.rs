//! Out of GPU memory, said in one line a user can act on. PyTorch's caching allocator reports
//! it as (torch 2.11, `c10/cuda/CUDACachingAllocator.cpp`): "CUDA out of memory. Tried to
//! allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 7.75 MiB is free. …
//! Of the allocated memory 75.10 GiB is allocated by PyTorch, and 2.00 GiB is reserved by
//! PyTorch but unallocated. …"; a failed CUDA call outside the allocator says "CUDA error: out
//! of memory". This module reads the figures out of either text.

/// What the allocator's message says, in bytes where it gives a figure.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OomReport {
    pub tried: Option<u64>,
    pub total: Option<u64>,
    pub free: Option<u64>,
    /// Allocated by PyTorch, and reserved by it on top (its cache, unallocated).
    pub allocated: Option<u64>,
    pub cached: Option<u64>,
}

impl OomReport {
    /// Reserved by PyTorch's allocator in all.
    pub fn reserved(&self) -> Option<u64> {
        Some(self.allocated? + self.cached?)
    }
}

/// The figures of a CUDA out-of-memory error in `text`, or `None` when it is not one.
pub fn parse(text: &str) -> Option<OomReport> {
    if !text.contains("CUDA out of memory") && !text.contains("CUDA error: out of memory") {
        return None;
    }
    let cached = text.find(" is reserved by PyTorch but unallocated").and_then(|end| {
        let before = &text[..end];
        before.rfind("and ").and_then(|start| size(&before[start + 4..]))
    });
    Some(OomReport {
        tried: after(text, "Tried to allocate "),
        total: after(text, "has a total capacity of "),
        free: after(text, " of which "),
        allocated: after(text, "Of the allocated memory "),
        cached,
    })
}

/// The size right after the first `marker` in `text`.
fn after(text: &str, marker: &str) -> Option<u64> {
    text.find(marker).and_then(|i| size(&text[i + marker.len()..]))
}

/// A size as the allocator prints it at the start of `text`: `2.00 GiB`, `512.00 KiB`,
/// `12 bytes`.
fn size(text: &str) -> Option<u64> {
    let mut words = text.split_whitespace();
    let number: f64 = words.next()?.parse().ok()?;
    let unit = words.next()?.trim_end_matches(['.', ',', ';']);
    let scale = match unit {
        "bytes" | "B" => 1.0,
        "KiB" => 1024.0,
        "MiB" => 1024.0 * 1024.0,
        "GiB" => 1024.0 * 1024.0 * 1024.0,
        "TiB" => 1024.0f64.powi(4),
        _ => return None,
    };
    Some((number * scale).round() as u64)
}

/// A size in the allocator's own style.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    let units = [("GiB", 1024.0f64.powi(3)), ("MiB", 1024.0 * 1024.0), ("KiB", 1024.0)];
    units
        .iter()
        .find(|(_, s)| b >= *s)
        .map_or_else(|| format!("{bytes} bytes"), |(u, s)| format!("{:.2} {u}", b / s))
}

/// Where the run stood when a GPU ran out of memory.
pub struct OomContext<'a> {
    pub device: &'a str,
    pub replica: Option<usize>,
    /// Samples each replica trains on per step.
    pub per_replica: usize,
    /// Replicas sharing that GPU.
    pub on_device: usize,
    /// The checkpoint on disk the run can continue from, if any.
    pub checkpoint: Option<String>,
    /// The lower precision that would help, when the run is in f32: `bf16` on a GPU that has
    /// it, else `f16`.
    pub half: Option<&'static str>,
}

/// The one line that says what ran out, that nothing saved was lost, and the way out.
pub fn explain(r: &OomReport, c: &OomContext<'_>) -> String {
    let replica = c.replica.map_or(String::new(), |r| format!("replica {r}, "));
    let mut figures = Vec::new();
    if let Some(t) = r.tried {
        figures.push(format!("it asked for {} more", human(t)));
    }
    match (r.free, r.total) {
        (Some(f), Some(t)) => figures.push(format!("{} of {} free", human(f), human(t))),
        (Some(f), None) => figures.push(format!("{} free", human(f))),
        _ => {}
    }
    if let Some(res) = r.reserved() {
        figures.push(format!("PyTorch reserves {}", human(res)));
    }
    let figures = if figures.is_empty() { String::new() } else { format!(": {}", figures.join(", ")) };
    let saved = match &c.checkpoint {
        Some(p) => format!("nothing saved was lost (the last checkpoint, {p}, is kept: --resume it)"),
        None => "nothing saved was lost".to_owned(),
    };
    let mut ways = vec!["a smaller --batch-size".to_owned()];
    if c.on_device > 1 {
        ways.push(format!("fewer than {} replicas on that GPU (--devices)", c.on_device));
    }
    if let Some(p) = c.half {
        ways.push(format!("--precision {p}"));
    }
    format!(
        "out of GPU memory on {} ({replica}{} samples per replica, {} replica(s) on that GPU){figures}; {saved}; rerun with {}",
        c.device,
        c.per_replica,
        c.on_device,
        ways.join(", or ")
    )
}

/// The CUDA caching allocator's message for an allocation it cannot make (torch 2.11's
/// wording, figures of an 80 GB GPU), as the `worker-oom` test fault
/// (`engine::faults`) injects it and the parser here reads it.
pub const ALLOCATOR_OOM: &str = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 7.75 MiB is free. Including non-PyTorch memory, this process has 79.17 GiB memory in use. Of the allocated memory 75.10 GiB is allocated by PyTorch, and 2.00 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.";

#[cfg(test)]
mod tests {
    use super::*;

    fn gib(x: f64) -> u64 {
        (x * 1024.0 * 1024.0 * 1024.0).round() as u64
    }

    #[test]
    fn the_allocators_figures_are_read() {
        let r = parse(ALLOCATOR_OOM).expect("an OOM");
        assert_eq!(r.tried, Some(gib(2.0)));
        assert_eq!(r.total, Some(gib(79.19)));
        assert_eq!(r.free, Some((7.75 * 1024.0 * 1024.0) as u64));
        assert_eq!(r.allocated, Some(gib(75.10)));
        assert_eq!(r.reserved(), Some(gib(75.10) + gib(2.0)));
        // Other processes listed, and CUDA graphs' private pools.
        let other = "CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 14.58 GiB of which 3.56 MiB is free. Process 1234 has 10.00 GiB memory in use. Process 5678 has 4.50 GiB memory in use. Of the allocated memory 3.10 GiB is allocated by PyTorch, with 1.00 GiB allocated in private pools (e.g., CUDA Graphs), and 120.00 MiB is reserved by PyTorch but unallocated.";
        let r = parse(other).unwrap();
        assert_eq!((r.tried, r.cached), (Some(20 << 20), Some(120 << 20)));
        // A CUDA call outside the allocator: an OOM without figures.
        assert_eq!(
            parse("CUDA error: out of memory\nCompile with `TORCH_USE_CUDA_DSA`"),
            Some(OomReport::default())
        );
        assert_eq!(parse("CUDA error: an illegal memory access was encountered"), None);
    }

    #[test]
    fn the_explanation_is_one_line_with_the_way_out() {
        let c = OomContext {
            device: "cuda:1",
            replica: Some(1),
            per_replica: 128,
            on_device: 2,
            checkpoint: Some("runs/x/checkpoint.safetensors".into()),
            half: Some("bf16"),
        };
        let line = explain(&parse(ALLOCATOR_OOM).unwrap(), &c);
        assert!(!line.contains('\n'), "{line}");
        for needle in [
            "out of GPU memory on cuda:1 (replica 1, 128 samples per replica, 2 replica(s) on that GPU)",
            "it asked for 2.00 GiB more",
            "7.75 MiB of 79.19 GiB free",
            "PyTorch reserves 77.10 GiB",
            "nothing saved was lost (the last checkpoint, runs/x/checkpoint.safetensors, is kept",
            "a smaller --batch-size, or fewer than 2 replicas on that GPU (--devices), or --precision bf16",
        ] {
            assert!(line.contains(needle), "{needle}\n{line}");
        }
        let plain =
            explain(&OomReport::default(), &OomContext { on_device: 1, half: None, checkpoint: None, ..c });
        assert!(plain.ends_with("nothing saved was lost; rerun with a smaller --batch-size"), "{plain}");
    }
}
