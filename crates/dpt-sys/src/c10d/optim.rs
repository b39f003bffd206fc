//! The fused optimizer kernels (`optim_shim.cpp`), as PyTorch's `fused=True` optimizers call
//! them: one pass over each tensor's parameters, gradients and state, the gradients' divisor
//! and the skip flag read on the device, so a step needs nothing from the host.

use std::ffi::c_char;

use tch::Tensor;

use super::{call, C10dError, CTensor};

extern "C" {
    #[allow(clippy::too_many_arguments)]
    fn dpt_fused_adam(
        params: *const *mut CTensor,
        grads: *const *mut CTensor,
        exp_avgs: *const *mut CTensor,
        exp_avg_sqs: *const *mut CTensor,
        steps: *const *mut CTensor,
        n: usize,
        lr: f64,
        lr_tensor: *mut CTensor,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        decoupled: i32,
        grad_scale: *mut CTensor,
        found_inf: *mut CTensor,
        err: *mut *mut c_char,
    ) -> i32;
    #[allow(clippy::too_many_arguments)]
    fn dpt_fused_sgd(
        params: *const *mut CTensor,
        grads: *const *mut CTensor,
        momentum_buffers: *const *mut CTensor,
        n: usize,
        lr: f64,
        lr_tensor: *mut CTensor,
        momentum: f64,
        weight_decay: f64,
        nesterov: i32,
        first_step: i32,
        grad_scale: *mut CTensor,
        found_inf: *mut CTensor,
        err: *mut *mut c_char,
    ) -> i32;
}

/// Adam's hyper-parameters for one step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamStep {
    pub lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
    /// AdamW's decoupled decay (`_fused_adamw_`) instead of Adam's L2 term (`_fused_adam_`).
    pub decoupled: bool,
}

/// SGD's hyper-parameters for one step (no dampening).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdStep {
    pub lr: f64,
    pub momentum: f64,
    pub weight_decay: f64,
    pub nesterov: bool,
    /// The momentum buffers start as the gradient (PyTorch's first step).
    pub first_step: bool,
}

/// The gradients' divisor and the skip flag, 0-dim float32 tensors on the tensors' device,
/// and the learning rate when the kernels read it there.
#[derive(Clone, Copy, Default)]
pub struct OnDevice<'a> {
    /// Each gradient is divided by it before use (and written back divided).
    pub grad_scale: Option<&'a Tensor>,
    /// Non-zero: the step changes nothing.
    pub found_inf: Option<&'a Tensor>,
    /// The learning rate read on the device instead of the step's number (a [`DeviceLr`]'s).
    pub lr: Option<&'a Tensor>,
}

/// A learning rate the fused kernels read on the device (the `tensor_lr` overloads), so that a
/// step whose launches are recorded once (a CUDA graph) takes each step's rate: written before
/// the step, read by the kernels. Its type is the one each device's kernels compute the rate in,
/// so that a rate given this way moves the weights exactly as the same number given as a
/// number does: float64 on the CPU (whose kernels take the rate as a double), float32 on a GPU
/// (whose kernels read a float32 rate and cast a number rate to float32 too).
pub struct DeviceLr(Tensor);

impl DeviceLr {
    /// A rate on `device`, set to `lr`.
    pub fn new(lr: f64, device: tch::Device) -> DeviceLr {
        let kind = if device.is_cuda() { tch::Kind::Float } else { tch::Kind::Double };
        DeviceLr(Tensor::from(lr).to_kind(kind).to_device(device))
    }

    /// Sets the rate the next steps read (a fill on the device: no host sync).
    pub fn set(&mut self, lr: f64) {
        let _ = self.0.fill_(lr);
    }

    /// The tensor the kernels read.
    pub fn tensor(&self) -> &Tensor {
        &self.0
    }
}

fn ptrs(tensors: &[Tensor]) -> Vec<*mut CTensor> {
    tensors.iter().map(|t| t.as_ptr().cast_mut()).collect()
}

fn ptr(t: Option<&Tensor>) -> *mut CTensor {
    t.map_or(std::ptr::null_mut(), |t| t.as_ptr().cast_mut())
}

fn same_lengths(lengths: &[usize]) -> Result<usize, C10dError> {
    match lengths.windows(2).all(|w| w[0] == w[1]) {
        true => Ok(lengths[0]),
        false => Err(C10dError(format!("a fused step takes lists of one length, got {lengths:?}"))),
    }
}

/// One Adam or AdamW step (`torch._fused_adam_` / `torch._fused_adamw_`) of `params` in place;
/// `steps`: each tensor's step count after this step (float32 tensors on their device).
pub fn fused_adam(
    params: &[Tensor],
    grads: &[Tensor],
    (exp_avgs, exp_avg_sqs): (&[Tensor], &[Tensor]),
    steps: &[Tensor],
    h: AdamStep,
    on_device: OnDevice<'_>,
) -> Result<(), C10dError> {
    let n = same_lengths(&[params.len(), grads.len(), exp_avgs.len(), exp_avg_sqs.len(), steps.len()])?;
    let (p, g, m, v, s) = (ptrs(params), ptrs(grads), ptrs(exp_avgs), ptrs(exp_avg_sqs), ptrs(steps));
    // SAFETY: every tensor is alive for the call; the kernel writes the parameters and the
    // moments in place, as torch.optim's fused step does through its own references.
    call(|err| unsafe {
        dpt_fused_adam(
            p.as_ptr(),
            g.as_ptr(),
            m.as_ptr(),
            v.as_ptr(),
            s.as_ptr(),
            n,
            h.lr,
            ptr(on_device.lr),
            h.betas.0,
            h.betas.1,
            h.weight_decay,
            h.eps,
            i32::from(h.decoupled),
            ptr(on_device.grad_scale),
            ptr(on_device.found_inf),
            err,
        )
    })
    .map(drop)
}

/// One SGD step (`torch._fused_sgd_`) of `params` in place; `momentum_buffers` empty when
/// `h.momentum` is 0.
pub fn fused_sgd(
    params: &[Tensor],
    grads: &[Tensor],
    momentum_buffers: &[Tensor],
    h: SgdStep,
    on_device: OnDevice<'_>,
) -> Result<(), C10dError> {
    let buffers = if h.momentum != 0.0 { momentum_buffers.len() } else { params.len() };
    let n = same_lengths(&[params.len(), grads.len(), buffers])?;
    let (p, g, b) = (ptrs(params), ptrs(grads), ptrs(momentum_buffers));
    // SAFETY: every tensor is alive for the call; the kernel writes the parameters and the
    // momentum buffers in place. With no momentum the buffer list is not read.
    call(|err| unsafe {
        dpt_fused_sgd(
            p.as_ptr(),
            g.as_ptr(),
            b.as_ptr(),
            n,
            h.lr,
            ptr(on_device.lr),
            h.momentum,
            h.weight_decay,
            i32::from(h.nesterov),
            i32::from(h.first_step),
            ptr(on_device.grad_scale),
            ptr(on_device.found_inf),
            err,
        )
    })
    .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two tensors of parameters, gradients and zeroed state, seeded.
    fn tensors(seed: i64) -> (Vec<Tensor>, Vec<Tensor>, Vec<Tensor>, Vec<Tensor>) {
        tch::manual_seed(seed);
        let p =
            vec![Tensor::randn([1000], tch::kind::FLOAT_CPU), Tensor::randn([7, 3], tch::kind::FLOAT_CPU)];
        let g =
            vec![Tensor::randn([1000], tch::kind::FLOAT_CPU), Tensor::randn([7, 3], tch::kind::FLOAT_CPU)];
        let zeros = |ts: &[Tensor]| ts.iter().map(Tensor::zeros_like).collect::<Vec<_>>();
        let (m, v) = (zeros(&p), zeros(&p));
        (p, g, m, v)
    }

    fn same(a: &[Tensor], b: &[Tensor]) -> bool {
        a.iter().zip(b).all(|(x, y)| x.equal(y))
    }

    #[test]
    fn a_rate_on_the_device_moves_the_weights_as_the_same_number_does() {
        let scale = Tensor::from(4.0f32);
        let lrs = [1e-3, 3e-4, 7e-4];
        for decoupled in [true, false] {
            // Each side its own gradients: with `grad_scale` the kernels write them back divided.
            let (p1, g1, m1, v1) = tensors(0);
            let (p2, g2, m2, v2) = tensors(0);
            let steps = || vec![Tensor::from(0.0f32), Tensor::from(0.0f32)];
            let (s1, s2) = (steps(), steps());
            let mut lr = DeviceLr::new(0.0, tch::Device::Cpu);
            for &rate in &lrs {
                for s in s1.iter().chain(&s2) {
                    let _ = s.shallow_clone().g_add_scalar_(1.0);
                }
                let h = AdamStep { lr: rate, betas: (0.9, 0.95), eps: 1e-8, weight_decay: 0.1, decoupled };
                let number = OnDevice { grad_scale: Some(&scale), ..OnDevice::default() };
                fused_adam(&p1, &g1, (&m1, &v1), &s1, h, number).unwrap();
                lr.set(rate);
                let device =
                    OnDevice { grad_scale: Some(&scale), lr: Some(lr.tensor()), ..OnDevice::default() };
                // The number in `h` is not read: a wrong one changes nothing.
                fused_adam(&p2, &g2, (&m2, &v2), &s2, AdamStep { lr: 1.0, ..h }, device).unwrap();
            }
            assert!(same(&p1, &p2) && same(&m1, &m2) && same(&v1, &v2), "decoupled {decoupled}");
        }
        let (p1, g, b1, _) = tensors(1);
        let (p2, _, b2, _) = tensors(1);
        let mut lr = DeviceLr::new(0.0, tch::Device::Cpu);
        for (i, &rate) in lrs.iter().enumerate() {
            let h =
                SgdStep { lr: rate, momentum: 0.9, weight_decay: 1e-4, nesterov: true, first_step: i == 0 };
            fused_sgd(&p1, &g, &b1, h, OnDevice::default()).unwrap();
            lr.set(rate);
            let device = OnDevice { lr: Some(lr.tensor()), ..OnDevice::default() };
            fused_sgd(&p2, &g, &b2, SgdStep { lr: 1.0, ..h }, device).unwrap();
        }
        assert!(same(&p1, &p2) && same(&b1, &b2), "SGD");
    }
}
