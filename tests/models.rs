//! The seed models: output shapes and parameter counts against the seed architectures.

use dpt_tui::engine::flat::{initial_flat, FlatTensors};
use dpt_tui::model::{self, Builder, Forward, ModelKind, Precision};
use tch::{Device, Kind, Tensor};

fn conv(cin: i64, cout: i64, k: i64) -> i64 {
    cout * cin * k * k + cout
}

fn linear(i: i64, o: i64) -> i64 {
    i * o + o
}

/// Parameter counts worked out layer by layer from the seeds.
fn expected_params(model: ModelKind) -> i64 {
    match model {
        ModelKind::Lenet => conv(1, 20, 3) + conv(20, 50, 5) + linear(800, 128) + linear(128, 10),
        ModelKind::MnistNet => conv(1, 10, 5) + conv(10, 20, 5) + linear(320, 50) + linear(50, 10),
        ModelKind::Resnet18 => {
            let bn = |c: i64| 2 * c;
            let residual = |cin: i64, cout: i64, project: bool| {
                conv(cin, cout, 3)
                    + bn(cout)
                    + conv(cout, cout, 3)
                    + bn(cout)
                    + if project { conv(cin, cout, 1) } else { 0 }
            };
            let mut total = conv(1, 64, 3) + bn(64);
            total += 2 * residual(64, 64, false);
            for (cin, cout) in [(64, 128), (128, 256), (256, 512)] {
                total += residual(cin, cout, true) + residual(cout, cout, false);
            }
            total + linear(512, 10)
        }
        ModelKind::Script => unreachable!("a TorchScript model's tensors come from its file"),
    }
}

#[test]
fn lenet_has_the_seed_parameter_count() {
    let mut b = Builder::default();
    model::build(ModelKind::Lenet, &mut b);
    assert_eq!(b.param_count(), 129_068);
}

#[test]
fn every_model_matches_its_architecture() {
    for model in [ModelKind::Lenet, ModelKind::MnistNet, ModelKind::Resnet18] {
        let mut b = Builder::default();
        let net = model::build(model, &mut b).expect("a built-in model");
        assert_eq!(b.param_count(), expected_params(model), "{model:?}");
        let params = FlatTensors::zeros(&b.params, Device::Cpu, true, model.prefers_channels_last(false));
        let buffers = FlatTensors::zeros(&b.buffers, Device::Cpu, false, false);
        params.layout.load_logical(&params.flat, &initial_flat(&b.params));
        buffers.layout.load_logical(&buffers.flat, &initial_flat(&b.buffers));
        let x = Tensor::rand([5, 1, 28, 28], (Kind::Float, Device::Cpu));
        let masks: Vec<Tensor> = net
            .dropout_masks(5)
            .into_iter()
            .map(|(shape, _)| Tensor::ones(shape.as_slice(), (Kind::Float, Device::Cpu)))
            .collect();
        for train in [true, false] {
            for precision in [Precision::F32, Precision::Bf16] {
                let ctx = Forward { train, masks: &masks, precision };
                let out = net.forward(&params.views, &buffers.views, &x, &ctx).unwrap();
                assert_eq!(out.size(), vec![5, 10], "{model:?} train={train}");
                assert_eq!(out.kind(), Kind::Float, "the loss sees f32");
                assert!(bool::try_from(out.isfinite().all()).unwrap());
            }
        }
    }
}

#[test]
fn resnet_declares_batchnorm_statistics_as_buffers() {
    let mut b = Builder::default();
    model::build(ModelKind::Resnet18, &mut b);
    // 17 BatchNorm layers (the stem and two in each of the 8 residual blocks), each with mean and var.
    assert!(b.buffers.iter().all(|s| s.name.ends_with("running_mean") || s.name.ends_with("running_var")));
    assert_eq!(b.buffers.len(), 2 * 17);
}

#[test]
fn lenet_initialization_follows_the_seed() {
    let mut b = Builder::default();
    model::build(ModelKind::Lenet, &mut b);
    tch::manual_seed(3);
    let flat = initial_flat(&b.params);
    let mut offset = 0;
    for spec in &b.params {
        let t = flat.narrow(0, offset, spec.numel());
        offset += spec.numel();
        let std = t.std(false).double_value(&[]);
        if spec.name.ends_with("bias") {
            assert_eq!(t.abs().sum(Kind::Double).double_value(&[]), 0.0, "{}", spec.name);
        } else if spec.numel() > 1000 {
            assert!((std - 0.01).abs() < 0.001, "{} std {std}", spec.name);
        }
    }
}
