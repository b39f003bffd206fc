//! Gradient hooks (`autograd_shim.cpp`): a Rust closure called with a leaf's gradient as soon as
//! the backward pass computes it, in `backward()` and in `autograd.grad` alike.

use std::ffi::{c_char, c_void, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tch::Tensor;

use super::{call, C10dError, CTensor};

type GradFn = unsafe extern "C" fn(*mut c_void, *mut CTensor, *mut *mut c_char) -> i32;
type DropFn = unsafe extern "C" fn(*mut c_void);

extern "C" {
    fn dpt_on_grad(
        leaf: *mut CTensor,
        f: GradFn,
        ctx: *mut c_void,
        drop: DropFn,
        err: *mut *mut c_char,
    ) -> i32;
}

/// What a hook did with a gradient.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// The gradient goes on through the backward pass as it is.
    PassOn,
    /// The hook kept its values: a zero of the gradient's shape that holds one element (an
    /// expanded scalar) goes on in its place, so that the backward pass does not keep a second
    /// copy of it until it returns.
    Kept,
}

/// Calls `f` with `leaf`'s gradient each time a backward pass computes it, before it is
/// accumulated or returned; `f` runs on the thread running that part of the backward pass (the
/// caller's on a CPU, the device's autograd thread on a GPU). An error from `f`, or a panic in
/// it, fails that backward pass with its message. The hook lives as long as `leaf`.
pub fn on_grad<F, E>(leaf: &Tensor, f: F) -> Result<(), C10dError>
where
    F: Fn(Tensor) -> Result<Handled, E> + Send + Sync + 'static,
    E: std::fmt::Display,
{
    let ctx = Box::into_raw(Box::new(f)).cast::<c_void>();
    let mut leaf = leaf.shallow_clone();
    // SAFETY: a live tensor handle; `ctx` is a leaked `Box<F>` that the shim owns from here on
    // (freed through `drop_hook::<F>`, also when registering fails), called only through
    // `run_hook::<F>`, which reads it as the `F` it is.
    call(|err| unsafe { dpt_on_grad(leaf.as_mut_ptr(), run_hook::<F, E>, ctx, drop_hook::<F>, err) })
        .and_then(|code| match code {
            0 => Ok(()),
            _ => Err(C10dError("cannot hook the gradient".into())),
        })
}

/// Runs the closure on a gradient; its error (or panic) becomes a malloc'ed message.
unsafe extern "C" fn run_hook<F, E>(ctx: *mut c_void, grad: *mut CTensor, message: *mut *mut c_char) -> i32
where
    F: Fn(Tensor) -> Result<Handled, E>,
    E: std::fmt::Display,
{
    // SAFETY: `ctx` is the `Box<F>` made in `on_grad`, alive while the hook is; `grad` is a
    // fresh heap handle the shim hands over.
    let (f, grad) = unsafe { (&*ctx.cast::<F>(), Tensor::from_ptr(grad)) };
    let why = match catch_unwind(AssertUnwindSafe(|| f(grad))) {
        Ok(Ok(Handled::PassOn)) => return 0,
        Ok(Ok(Handled::Kept)) => return 2,
        Ok(Err(why)) => why.to_string(),
        Err(panic) => crate::panic_message(&*panic),
    };
    let why = CString::new(why.replace('\0', " ")).unwrap_or_default();
    // SAFETY: strdup copies into malloc'ed memory, which the shim frees with `free`.
    unsafe { *message = libc::strdup(why.as_ptr()) };
    1
}

/// Frees the closure once the hook is gone.
unsafe extern "C" fn drop_hook<F>(ctx: *mut c_void) {
    // SAFETY: `ctx` is the `Box<F>` leaked in `on_grad`, dropped exactly once, by the shim.
    drop(unsafe { Box::from_raw(ctx.cast::<F>()) });
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tch::{Kind, Tensor};

    use super::{on_grad, Handled};

    /// Which leaf's gradient each hook call saw, in order.
    type Seen = Arc<Mutex<Vec<(char, Vec<f32>)>>>;

    #[test]
    fn the_hook_sees_each_gradient_under_autograd_grad_before_it_returns() {
        let a = Tensor::ones([3], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        let b = Tensor::ones([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        let seen: Seen = Arc::default();
        for (name, leaf) in [('a', &a), ('b', &b)] {
            let seen = Arc::clone(&seen);
            on_grad(leaf, move |g| {
                seen.lock().unwrap().push((name, Vec::<f32>::try_from(&g).unwrap()));
                Ok::<_, String>(Handled::PassOn)
            })
            .unwrap();
        }
        // b's gradient is made first: it is nearer the loss.
        let loss = (&a * 2.0).sum(Kind::Float) * (&b * 3.0).sum(Kind::Float);
        let grads = Tensor::run_backward(&[loss], &[&a, &b], false, false);
        assert_eq!(Vec::<f32>::try_from(&grads[0]).unwrap(), vec![12.0; 3]);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen, vec![('b', vec![18.0; 2]), ('a', vec![12.0; 3])]);
    }

    #[test]
    fn an_error_in_the_hook_fails_the_backward_pass_with_its_message() {
        let a = Tensor::ones([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        on_grad(&a, |_| Err::<Handled, _>("the bucket is gone")).unwrap();
        let loss = (&a * 2.0).sum(Kind::Float);
        let e = Tensor::f_run_backward(&[loss], &[&a], false, false).expect_err("the hook failed");
        assert!(e.to_string().contains("the bucket is gone"), "{e}");
        let b = Tensor::ones([2], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        on_grad(&b, |_| -> Result<Handled, String> { panic!("a bug in the hook") }).unwrap();
        let loss = (&b * 2.0).sum(Kind::Float);
        let e = Tensor::f_run_backward(&[loss], &[&b], false, false).expect_err("the hook panicked");
        assert!(e.to_string().contains("a bug in the hook"), "{e}");
    }

    #[test]
    fn a_leaf_that_does_not_require_grad_cannot_be_hooked() {
        let a = Tensor::ones([2], (Kind::Float, tch::Device::Cpu));
        assert!(on_grad(&a, |_| Ok::<_, String>(Handled::PassOn)).is_err());
    }

    #[test]
    fn a_kept_gradient_goes_on_as_a_one_element_zero_of_its_shape() {
        let a = Tensor::ones([3, 4], (Kind::Float, tch::Device::Cpu)).set_requires_grad(true);
        let kept: Arc<Mutex<Option<Tensor>>> = Arc::default();
        let into = Arc::clone(&kept);
        on_grad(&a, move |g| {
            *into.lock().unwrap() = Some(g.copy());
            Ok::<_, String>(Handled::Kept)
        })
        .unwrap();
        let loss = (&a * 2.0).sum(Kind::Float);
        let grads = Tensor::run_backward(&[loss], &[&a], false, false);
        assert_eq!(grads[0].size(), [3, 4]);
        assert_eq!(grads[0].stride(), [0, 0], "a stand-in, not a copy");
        assert_eq!(grads[0].abs().sum(Kind::Float).double_value(&[]), 0.0);
        let kept = kept.lock().unwrap().take().expect("the hook ran");
        assert_eq!(Vec::<f32>::try_from(&kept.reshape([-1])).unwrap(), vec![2.0; 12]);
    }
}
