//! Where a sweep's trials run: the machine cut into places (slots), one trial in each at a
//! time: a GPU each (or several), seen alone by the trial, or on the CPU a share of the cores.

/// Where one trial at a time runs: its devices as the trial names them and, on the CPU, its
/// threads; on GPUs the ones it sees (`CUDA_VISIBLE_DEVICES`), so that it makes no CUDA
/// context on the others' GPUs.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    /// The trial's `--devices`.
    pub devices: String,
    pub threads: Option<usize>,
    /// The trial's `CUDA_VISIBLE_DEVICES` (the GPUs of this machine it gets).
    pub visible: Option<String>,
    /// The devices as this machine numbers them, for the lines and the table.
    pub shown: String,
}

impl Slot {
    pub fn describe(&self) -> String {
        match self.threads {
            Some(1) => format!("{} (1 thread)", self.shown),
            Some(n) => format!("{} ({n} threads)", self.shown),
            None => self.shown.clone(),
        }
    }
}

/// The places `count` trials run in on a machine of `cores` and `gpus`: one GPU each (or
/// `per` GPUs), or on the CPU `per` cores each (by default the cores shared by up to 4 trials
/// at once); as many slots as fit, at least one. `visible` is this process's
/// `CUDA_VISIBLE_DEVICES`: a trial's GPUs are picked from it where it lists them.
pub fn slots(
    (gpus, cores): (usize, usize),
    per: Option<usize>,
    count: usize,
    visible: Option<&str>,
) -> Result<Vec<Slot>, String> {
    if gpus > 0 {
        let per = per.unwrap_or(1);
        if per > gpus {
            return Err(format!("--trial-devices {per} asks for more GPUs than this machine's {gpus}"));
        }
        let listed: Vec<&str> = visible.map_or_else(Vec::new, |v| v.split(',').map(str::trim).collect());
        let physical = |g: usize| match listed.get(g) {
            Some(id) if listed.len() >= gpus => (*id).to_owned(),
            _ => g.to_string(),
        };
        return Ok((0..gpus / per)
            .map(|s| {
                let own = s * per..(s + 1) * per;
                let join = |f: &dyn Fn(usize) -> String| own.clone().map(f).collect::<Vec<_>>().join(",");
                Slot {
                    devices: (0..per).map(|j| format!("cuda:{j}")).collect::<Vec<_>>().join(","),
                    threads: None,
                    visible: Some(join(&physical)),
                    shown: join(&|g| format!("cuda:{g}")),
                }
            })
            .collect());
    }
    let per = per.unwrap_or_else(|| (cores / count.clamp(1, 4)).max(1));
    if per > cores {
        return Err(format!("--trial-devices {per} asks for more cores than this machine's {cores}"));
    }
    let slot = Slot { devices: "cpu".into(), threads: Some(per), visible: None, shown: "cpu".into() };
    Ok(vec![slot; cores / per])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trials_get_a_gpu_each_or_a_share_of_the_cores() {
        let cpu = |threads: usize| Slot {
            devices: "cpu".into(),
            threads: Some(threads),
            visible: None,
            shown: "cpu".into(),
        };
        let gpu = slots((4, 64), None, 10, None).expect("accepted");
        assert_eq!(gpu.len(), 4);
        let last = Slot {
            devices: "cuda:0".into(),
            threads: None,
            visible: Some("3".into()),
            shown: "cuda:3".into(),
        };
        assert_eq!(gpu[3], last, "each trial sees its own GPU alone, as cuda:0");
        let pairs = slots((4, 64), Some(2), 10, None).expect("accepted");
        assert_eq!(
            pairs.iter().map(|s| s.shown.as_str()).collect::<Vec<_>>(),
            ["cuda:0,cuda:1", "cuda:2,cuda:3"]
        );
        assert_eq!(pairs[1].devices, "cuda:0,cuda:1");
        assert_eq!(pairs[1].visible.as_deref(), Some("2,3"));
        // A CUDA_VISIBLE_DEVICES of this process: the trials' GPUs are picked from it.
        let picked = slots((2, 64), None, 10, Some("5, GPU-a1b2")).expect("accepted");
        assert_eq!(picked[0].visible.as_deref(), Some("5"));
        assert_eq!(picked[1].visible.as_deref(), Some("GPU-a1b2"));
        assert!(slots((2, 64), Some(3), 10, None)
            .expect_err("refused")
            .contains("more GPUs than this machine's 2"));
        // The CPU: up to 4 trials at once share the cores.
        assert_eq!(slots((0, 2), None, 4, None).expect("accepted"), vec![cpu(1); 2]);
        assert_eq!(slots((0, 16), None, 4, None).expect("accepted").len(), 4);
        assert_eq!(slots((0, 16), None, 2, None).expect("accepted"), vec![cpu(8); 2]);
        assert_eq!(slots((0, 16), None, 1, None).expect("accepted").len(), 1);
        assert_eq!(slots((0, 16), Some(5), 9, None).expect("accepted").len(), 3);
        assert!(slots((0, 2), Some(3), 4, None)
            .expect_err("refused")
            .contains("more cores than this machine's 2"));
    }
}
