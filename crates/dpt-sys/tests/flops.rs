//! A thread's FLOP counter against PyTorch's own `FlopCounterMode`: the same models on the same
//! shapes (`tests/flops_reference.py`, run once by the set-up's Python), counted one forward
//! each, give the same totals exactly; a TorchScript module's forward too. Then what a counter
//! does not count: another thread's operators, and anything once dropped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Barrier, OnceLock};

use dpt_sys::c10d::flops::FlopCount;
use dpt_sys::c10d::jit::ScriptModule;
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

/// What `flops_reference.py` printed, and the TorchScript module it saved.
struct Reference {
    totals: HashMap<String, f64>,
    script_module: Vec<u8>,
}

/// The set-up's Python (the virtualenv with torch), or `$PYTHON`.
fn python() -> String {
    std::env::var("PYTHON")
        .or_else(|_| std::env::var("DPT_VENV").map(|v| format!("{v}/bin/python")))
        .unwrap_or_else(|_| "python3".to_owned())
}

fn reference() -> &'static Reference {
    static REFERENCE: OnceLock<Reference> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("dpt-flops-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/flops_reference.py");
        let out = Command::new(python()).arg(&script).arg(&dir).output().unwrap();
        let script_module = std::fs::read(dir.join("tiny.pt"));
        let _ = std::fs::remove_dir_all(&dir);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let totals = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (name, total) = l.split_once(' ').unwrap();
                (name.to_owned(), total.parse().unwrap())
            })
            .collect();
        Reference { totals, script_module: script_module.unwrap() }
    })
}

fn pytorch_flops(name: &str) -> f64 {
    reference().totals[name]
}

/// The FLOPs this thread's `f` does, counted.
fn counted(f: impl FnOnce()) -> f64 {
    let count = FlopCount::start().unwrap();
    f();
    count.total()
}

fn randn(shape: &[i64]) -> Tensor {
    Tensor::randn(shape, (Kind::Float, Device::Cpu))
}

#[test]
fn a_linear_stack_counts_as_flop_counter_mode_counts_it() {
    let vs = nn::VarStore::new(Device::Cpu);
    let first = nn::linear(vs.root() / "first", 16, 32, Default::default());
    let second =
        nn::linear(vs.root() / "second", 32, 8, nn::LinearConfig { bias: false, ..Default::default() });
    let (tokens, rows) = (randn(&[3, 5, 16]), randn(&[4, 16]));
    let got = counted(|| {
        let _ = second.forward(&first.forward(&tokens).relu());
        let _ = first.forward(&rows);
    });
    assert_eq!(got, pytorch_flops("linear_stack"));
    assert_eq!(got, 2.0 * (15.0 * 32.0 * 16.0 + 15.0 * 8.0 * 32.0 + 4.0 * 32.0 * 16.0));
}

#[test]
fn a_convolutional_net_counts_as_flop_counter_mode_counts_it() {
    let vs = nn::VarStore::new(Device::Cpu);
    let root = vs.root();
    let conv1 = nn::conv2d(&root / "conv1", 1, 6, 5, Default::default());
    let conv2 = nn::conv2d(&root / "conv2", 6, 16, 5, Default::default());
    let fc1 = nn::linear(&root / "fc1", 256, 120, Default::default());
    let fc2 = nn::linear(&root / "fc2", 120, 10, Default::default());
    let x = randn(&[2, 1, 28, 28]);
    let got = counted(|| {
        let x = conv1.forward(&x).relu().max_pool2d_default(2);
        let x = conv2.forward(&x).relu().max_pool2d_default(2);
        let _ = fc2.forward(&fc1.forward(&x.flatten(1, -1)).relu());
    });
    assert_eq!(got, pytorch_flops("lenet"));
}

#[test]
fn a_transposed_convolution_counts_its_filter_at_every_input_point_as_flop_counter_mode_does() {
    let vs = nn::VarStore::new(Device::Cpu);
    let config = nn::ConvTransposeConfig { stride: 2, padding: 1, output_padding: 1, ..Default::default() };
    let up = nn::conv_transpose2d(vs.root() / "up", 4, 2, 3, config);
    let x = randn(&[2, 4, 5, 5]);
    let got = counted(|| {
        let _ = up.forward(&x);
    });
    assert_eq!(got, pytorch_flops("transposed_convolution"));
    assert_eq!(got, 2.0 * 2.0 * (4.0 * 2.0 * 9.0) * 25.0);
}

#[test]
fn batched_products_count_as_flop_counter_mode_counts_them() {
    let (a, b, c) = (randn(&[4, 3, 5]), randn(&[4, 5, 7]), randn(&[4, 3, 7]));
    let (x, y) = (randn(&[2, 3, 4, 5]), randn(&[2, 3, 5, 6]));
    let got = counted(|| {
        let _ = a.bmm(&b);
        let _ = c.baddbmm(&a, &b, 1.0, 1.0);
        let _ = x.matmul(&y);
    });
    assert_eq!(got, pytorch_flops("batched_products"));
}

#[test]
fn attention_counts_its_two_products_as_flop_counter_mode_counts_them() {
    let (q, k, v) = (randn(&[2, 4, 16, 8]), randn(&[2, 4, 16, 8]), randn(&[2, 4, 16, 8]));
    let (q2, k2, v2) = (randn(&[2, 4, 6, 8]), randn(&[2, 4, 10, 8]), randn(&[2, 4, 10, 12]));
    let got = counted(|| {
        // On the CPU's own flash kernel, which FlopCounterMode would count as nothing.
        let _ = Tensor::scaled_dot_product_attention(&q, &k, &v, None::<&Tensor>, 0.0, true, None, false);
        let _ = Tensor::scaled_dot_product_attention(&q2, &k2, &v2, None::<&Tensor>, 0.0, false, None, false);
    });
    assert_eq!(got, pytorch_flops("attention"));
    assert_eq!(got, 2.0 * 2.0 * 4.0 * (16.0 * 16.0 * 16.0 + 6.0 * 10.0 * 20.0));
}

#[test]
fn a_torchscript_forward_counts_as_flop_counter_mode_counts_it_on_every_run() {
    let path = std::env::temp_dir().join(format!("dpt-flops-tiny-{}.pt", std::process::id()));
    std::fs::write(&path, &reference().script_module).unwrap();
    let module = ScriptModule::load(&path, Device::Cpu);
    let _ = std::fs::remove_file(&path);
    let module = module.unwrap();
    let x = randn(&[2, 1, 8, 8]);
    // The profiling executor's first run, then the optimized graph's.
    for _ in 0..3 {
        let got = counted(|| {
            module.forward(&[&x]).unwrap();
        });
        assert_eq!(got, pytorch_flops("script_forward"));
    }
}

#[test]
fn counters_on_one_thread_nest_and_may_close_in_any_order() {
    let (a, b) = (randn(&[8, 4]), randn(&[4, 2]));
    let mm = 2.0 * 8.0 * 4.0 * 2.0;
    let outer = FlopCount::start().unwrap();
    let _ = a.mm(&b);
    let inner = FlopCount::start().unwrap();
    let _ = a.mm(&b);
    assert_eq!((outer.total(), inner.total()), (2.0 * mm, mm));
    drop(outer);
    let _ = a.mm(&b);
    assert_eq!(inner.total(), 2.0 * mm, "the inner one counts on alone");
}

#[test]
fn a_dropped_counter_leaves_nothing_behind() {
    let (a, b) = (randn(&[8, 4]), randn(&[4, 2]));
    let mm = 2.0 * 8.0 * 4.0 * 2.0;
    for _ in 0..100 {
        assert_eq!(counted(|| drop(a.mm(&b))), mm);
    }
    // Nothing open: counted by no one, and the next counter starts from nothing.
    let _ = a.mm(&b);
    let _ = Tensor::scaled_dot_product_attention(&a, &a, &a, None::<&Tensor>, 0.0, false, None, false);
    let count = FlopCount::start().unwrap();
    assert_eq!(count.total(), 0.0);
    let _ = a.mm(&b);
    assert_eq!(count.total(), mm);
}

#[test]
fn another_thread_s_operations_are_not_counted() {
    let barrier = Barrier::new(2);
    let mm = |n: i64| 2.0 * (n * n * n) as f64;
    std::thread::scope(|scope| {
        let other = scope.spawn(|| {
            let x = randn(&[32, 32]);
            let count = FlopCount::start().unwrap();
            barrier.wait();
            for _ in 0..50 {
                let _ = x.mm(&x);
            }
            barrier.wait();
            count.total()
        });
        let x = randn(&[16, 16]);
        let count = FlopCount::start().unwrap();
        barrier.wait();
        for _ in 0..20 {
            let _ = x.mm(&x);
        }
        barrier.wait();
        assert_eq!(count.total(), 20.0 * mm(16));
        assert_eq!(other.join().unwrap(), 50.0 * mm(32));
    });
}
