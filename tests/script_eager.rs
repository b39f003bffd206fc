//! A user's TorchScript model runs op by op as its Python original does in eager mode, not
//! through TorchScript's optimized autodiff graphs, whose dropout draws a random mask even at
//! p = 0 (the cost that made scripted transformers slower than under DDP). Alone in its test
//! binary: it reads libtorch's one CPU generator, which no other test may draw from meanwhile.

mod common;

use dpt_sys::c10d::jit::ScriptModule;
use tch::{Device, Kind, Tensor};

#[test]
fn a_dropout_of_zero_draws_no_random_numbers_after_the_profiling_runs() {
    let dir = tempfile::tempdir().unwrap();
    let module = ScriptModule::load(&common::make_model("cnn-nodrop", 1, dir.path()), Device::Cpu).unwrap();
    module.set_train(true).unwrap();
    let params: Vec<Tensor> = module.named_parameters().unwrap().into_iter().map(|(_, t)| t).collect();
    let inputs: Vec<&Tensor> = params.iter().collect();
    let x = Tensor::ones([4, 1, 28, 28], (Kind::Float, Device::Cpu));
    let step = || {
        let loss = module.forward(&[&x]).unwrap()[0].sum(Kind::Float);
        Tensor::run_backward(&[loss], &inputs, false, false);
    };
    // TorchScript's profiling executor optimizes a graph after its first runs.
    for _ in 0..4 {
        step();
    }
    tch::manual_seed(3);
    let untouched = Tensor::rand([8], (Kind::Float, Device::Cpu));
    tch::manual_seed(3);
    step();
    let after_a_step = Tensor::rand([8], (Kind::Float, Device::Cpu));
    assert!(untouched.equal(&after_a_step), "the forward and backward pass drew random numbers");
}
