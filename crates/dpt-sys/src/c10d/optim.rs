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

/// The gradients' divisor and the skip flag, 0-dim float32 tensors on the tensors' device.
#[derive(Clone, Copy, Default)]
pub struct OnDevice<'a> {
    /// Each gradient is divided by it before use.
    pub grad_scale: Option<&'a Tensor>,
    /// Non-zero: the step changes nothing.
    pub found_inf: Option<&'a Tensor>,
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
