//! What `dpt-tui bench` runs: its cases at the sizes the machine gets (full sizes on GPUs,
//! small ones on the CPU), the time budget and each case's share of it. Plain data and
//! decisions, tested without running anything.

use std::time::Duration;

use dpt_tui::model::Precision;

/// The model a case trains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Lenet,
    Resnet18,
    MnistNet,
    /// nanoGPT's architecture (`assets/pytorch/gpt.py`) of this shape, scripted by the Python.
    Gpt(GptShape),
}

impl Arch {
    /// The `--model` of a built-in, or the PyTorch script's `--model`.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Lenet => "lenet",
            Arch::Resnet18 => "resnet18",
            Arch::MnistNet => "mnist-net",
            Arch::Gpt(_) => "gpt",
        }
    }
}

/// The devices a case trains on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// One replica on the first device.
    One,
    /// Two replicas sharing the first device.
    TwoOnOne,
    /// One replica per GPU, every GPU of the bench.
    EveryGpu,
}

/// A GPT's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GptShape {
    pub vocab: usize,
    pub block: usize,
    pub width: usize,
    pub layers: usize,
    pub heads: usize,
}

/// GPT-2 124M (nanoGPT's `gpt2` config: vocabulary padded to 50,304).
pub const GPT2_SMALL: GptShape = GptShape { vocab: 50_304, block: 1024, width: 768, layers: 12, heads: 12 };
/// The GPT of the CPU's bench: the language-model benchmark's (`lm_vs_pytorch`).
pub const GPT_CPU: GptShape = GptShape { vocab: 256, block: 128, width: 128, layers: 4, heads: 4 };

/// How the GPT cases train, on both sides: nanoGPT's GPT-2 recipe (AdamW at lr 6e-4, betas
/// 0.9/0.95, weight decay 0.1 on the matrices, gradients clipped to norm 1). Written here once:
/// dpt-tui gets it as flags, the PyTorch loop as JSON.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GptRecipe {
    pub lr: f64,
    pub betas: (f64, f64),
    pub weight_decay: f64,
    pub clip: f64,
}

pub const GPT_RECIPE: GptRecipe = GptRecipe { lr: 6e-4, betas: (0.9, 0.95), weight_decay: 0.1, clip: 1.0 };

impl GptRecipe {
    /// dpt-tui's flags for the recipe.
    pub fn flags(&self) -> Vec<String> {
        let (b1, b2) = self.betas;
        [
            ("--optimizer", "adamw".to_owned()),
            ("--lr", self.lr.to_string()),
            ("--betas", format!("{b1},{b2}")),
            ("--weight-decay", self.weight_decay.to_string()),
            ("--clip-grad-norm", self.clip.to_string()),
        ]
        .into_iter()
        .flat_map(|(flag, value)| [flag.to_owned(), value])
        .collect()
    }

    /// The recipe as `gpt.py bench` reads it: `{"lr", "betas", "weight_decay", "clip"}`.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("numbers serialize")
    }
}

/// What a case measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Trains a model: dpt-tui, then the plain PyTorch loop.
    Train { net: Arch, precision: Precision, placement: Placement },
    /// NCCL's allreduce across every GPU: its bus bandwidth.
    Allreduce,
}

/// One case of the bench, at the size this machine gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    pub name: &'static str,
    pub kind: Kind,
    /// Samples (windows, for a GPT) per step, over all replicas.
    pub batch: usize,
    /// Steps not timed (cuDNN's search, the allocator's growth, the first compilations).
    pub warmup: usize,
    /// Steps timed.
    pub steps: usize,
    /// Relative share of the budget.
    pub weight: u32,
}

impl Case {
    /// The GPT's shape, for a case that trains one.
    pub fn gpt(&self) -> Option<GptShape> {
        match self.kind {
            Kind::Train { net: Arch::Gpt(shape), .. } => Some(shape),
            _ => None,
        }
    }
}

/// Every case's name, in the order they run.
pub const CASE_NAMES: [&str; 9] = [
    "lenet",
    "resnet18",
    "resnet18-bf16",
    "mnist-net",
    "gpt",
    "gpt-bf16",
    "two-replicas",
    "data-parallel",
    "allreduce",
];

/// The cases for a machine with `gpus` GPUs in the bench (0: the CPU), by name.
pub fn cases(gpus: usize) -> Vec<Case> {
    let gpu = gpus > 0;
    let train = |net, precision, placement| Kind::Train { net, precision, placement };
    // Each pair is (on a GPU, on the CPU); a weight is about the case's share of the time.
    let sized = |name, kind, batch: (usize, usize), steps: (usize, usize), weight: (u32, u32)| {
        let (batch, steps, weight) =
            if gpu { (batch.0, steps.0, weight.0) } else { (batch.1, steps.1, weight.1) };
        Case { name, kind, batch, warmup: (steps / 4).max(2), steps, weight }
    };
    let gpt = Arch::Gpt(if gpu { GPT2_SMALL } else { GPT_CPU });
    let f32 = Precision::F32;
    let bf16 = Precision::Bf16;
    let mut all = vec![
        sized("lenet", train(Arch::Lenet, f32, Placement::One), (256, 256), (160, 40), (2, 2)),
        sized("resnet18", train(Arch::Resnet18, f32, Placement::One), (256, 32), (60, 8), (3, 4)),
        sized("resnet18-bf16", train(Arch::Resnet18, bf16, Placement::One), (256, 32), (60, 8), (3, 4)),
        sized("mnist-net", train(Arch::MnistNet, f32, Placement::One), (64, 64), (200, 40), (2, 1)),
        sized("gpt", train(gpt, f32, Placement::One), (12, 16), (30, 16), (5, 2)),
        sized("gpt-bf16", train(gpt, bf16, Placement::One), (12, 16), (30, 16), (4, 2)),
        sized("two-replicas", train(Arch::Resnet18, f32, Placement::TwoOnOne), (256, 32), (60, 8), (3, 4)),
    ];
    if gpus >= 2 {
        all.push(Case {
            batch: 256 * gpus,
            ..sized(
                "data-parallel",
                train(Arch::Resnet18, f32, Placement::EveryGpu),
                (256, 0),
                (60, 0),
                (3, 0),
            )
        });
        // Last: it runs in this process, whose CUDA contexts then stay for the bench's end.
        all.push(sized("allreduce", Kind::Allreduce, (0, 0), (0, 0), (1, 0)));
    }
    all
}

/// The cases `--cases` names (all of the machine's when `None`), in the bench's order; an
/// unknown name, or one this machine cannot run, is refused in one line.
pub fn select(all: Vec<Case>, asked: &[String]) -> Result<Vec<Case>, String> {
    if asked.is_empty() {
        return Ok(all);
    }
    let names: Vec<&str> = asked.iter().map(|n| n.trim()).filter(|n| !n.is_empty()).collect();
    for name in &names {
        if !CASE_NAMES.contains(name) {
            return Err(format!("unknown bench case '{name}'; use {}", dpt_core::one_of(&CASE_NAMES)));
        }
        if !all.iter().any(|c| c.name == *name) {
            return Err(format!("bench case '{name}' needs two GPUs or more; this bench has fewer"));
        }
    }
    if names.is_empty() {
        return Err("--cases is empty; name one or more cases, or leave it out for all".into());
    }
    Ok(all.into_iter().filter(|c| names.contains(&c.name)).collect())
}

/// How long the case at `index` may take: its weight's share of what is left of the budget,
/// so a case that ends early leaves its time to the rest.
pub fn deadline(cases: &[Case], index: usize, left: Duration) -> Duration {
    let rest: u32 = cases[index..].iter().map(|c| c.weight).sum();
    left.mul_f64(f64::from(cases[index].weight) / f64::from(rest.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--cases` as clap splits it.
    fn split(list: &str) -> Vec<String> {
        list.split(',').map(str::to_owned).collect()
    }

    #[test]
    fn the_gpt_recipe_is_the_same_for_both_sides() {
        let flags = GPT_RECIPE.flags().join(" ");
        assert_eq!(flags, "--optimizer adamw --lr 0.0006 --betas 0.9,0.95 --weight-decay 0.1 --clip-grad-norm 1");
        let json: serde_json::Value = serde_json::from_str(&GPT_RECIPE.json()).expect("json");
        assert_eq!(json, serde_json::json!({"lr": 6e-4, "betas": [0.9, 0.95], "weight_decay": 0.1, "clip": 1.0}));
    }

    #[test]
    fn the_cpu_gets_the_cases_at_small_sizes_and_gpus_the_full_ones() {
        let cpu = cases(0);
        let names: Vec<&str> = cpu.iter().map(|c| c.name).collect();
        assert_eq!(names, CASE_NAMES[..7]);
        let gpt = cpu.iter().find(|c| c.name == "gpt").expect("a gpt case");
        assert_eq!(gpt.gpt(), Some(GPT_CPU));
        let one = cases(1);
        assert_eq!(one.iter().find(|c| c.name == "gpt").and_then(Case::gpt), Some(GPT2_SMALL));
        assert_eq!(one.iter().find(|c| c.name == "resnet18").map(|c| c.batch), Some(256));
        let eight = cases(8);
        assert_eq!(eight.len(), 9);
        assert_eq!(
            eight.iter().find(|c| c.name == "data-parallel").map(|c| c.batch),
            Some(2048),
            "256 per GPU"
        );
    }

    #[test]
    fn cases_are_chosen_by_name_and_a_wrong_name_is_refused() {
        let picked = select(cases(0), &split("gpt,lenet")).expect("known");
        assert_eq!(picked.iter().map(|c| c.name).collect::<Vec<_>>(), ["lenet", "gpt"]);
        let unknown = select(cases(0), &split("vgg")).expect_err("refused");
        assert!(unknown.starts_with("unknown bench case 'vgg'; use lenet, resnet18,"), "{unknown}");
        let gpus = select(cases(1), &split("allreduce")).expect_err("refused");
        assert!(gpus.contains("needs two GPUs"), "{gpus}");
        assert!(select(cases(0), &split(" , ")).is_err());
    }

    #[test]
    fn each_case_gets_its_share_of_what_is_left() {
        let all = cases(0);
        let left = Duration::from_secs(190);
        let total: u32 = all.iter().map(|c| c.weight).sum();
        assert_eq!(deadline(&all, 0, left), left.mul_f64(f64::from(all[0].weight) / f64::from(total)));
        let last = all.len() - 1;
        assert_eq!(
            deadline(&all, last, Duration::from_secs(30)),
            Duration::from_secs(30),
            "the last takes all"
        );
    }
}
