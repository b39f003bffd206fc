//! TorchScript modules through the shim (`jit_shim.cpp`): a user's model loaded on a device,
//! its named parameters and buffers, its forward pass, and saving it back.

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr::NonNull;

use tch::{Device, Tensor};

use super::{call, non_null, C10dError, CTensor};

#[repr(C)]
struct RawModule {
    _private: [u8; 0],
}

extern "C" {
    fn dpt_jit_load(path: *const c_char, cuda_index: i32, err: *mut *mut c_char) -> *mut RawModule;
    fn dpt_jit_free(m: *mut RawModule);
    fn dpt_jit_named(
        m: *mut RawModule,
        buffers: i32,
        names: *mut *mut *mut c_char,
        tensors: *mut *mut *mut CTensor,
        err: *mut *mut c_char,
    ) -> usize;
    fn dpt_free_array(a: *mut c_void);
    fn dpt_free_string(s: *mut c_char);
    fn dpt_jit_set_train(m: *mut RawModule, on: i32, err: *mut *mut c_char) -> i32;
    fn dpt_jit_forward(
        m: *mut RawModule,
        inputs: *const *mut CTensor,
        n: usize,
        outputs: *mut *mut *mut CTensor,
        err: *mut *mut c_char,
    ) -> usize;
    fn dpt_jit_forward_inputs(m: *mut RawModule, err: *mut *mut c_char) -> i32;
    fn dpt_jit_save(m: *mut RawModule, path: *const c_char, err: *mut *mut c_char) -> i32;
    fn dpt_jit_uses_randomness(m: *mut RawModule, err: *mut *mut c_char) -> i32;
}

/// A loaded TorchScript module, owned by one thread at a time.
pub struct ScriptModule(NonNull<RawModule>);

// SAFETY: a torch::jit::Module may move between threads; it is used by one at a time.
unsafe impl Send for ScriptModule {}

fn c_path(path: &Path) -> Result<CString, C10dError> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| C10dError(format!("{} holds a NUL byte", path.display())))
}

impl ScriptModule {
    /// Loads `path` (a `torch.jit.save` file) onto `device`.
    pub fn load(path: &Path, device: Device) -> Result<ScriptModule, C10dError> {
        let cuda = match device {
            Device::Cuda(i) => i32::try_from(i).map_err(|_| C10dError("device index too large".into()))?,
            _ => -1,
        };
        let p = c_path(path)?;
        // SAFETY: NUL-terminated path; the shim returns an owned handle or an error.
        let raw = call(|err| unsafe { dpt_jit_load(p.as_ptr(), cuda, err) })?;
        Ok(ScriptModule(non_null(raw, "TorchScript load")?))
    }

    fn named(&self, buffers: bool) -> Result<Vec<(String, Tensor)>, C10dError> {
        let mut names: *mut *mut c_char = std::ptr::null_mut();
        let mut tensors: *mut *mut CTensor = std::ptr::null_mut();
        // SAFETY: live handle; the shim fills two malloc'ed arrays of `n` entries we now own.
        let n = call(|err| unsafe {
            dpt_jit_named(self.0.as_ptr(), i32::from(buffers), &mut names, &mut tensors, err)
        })?;
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            // SAFETY: entries 0..n are valid: a strdup'ed name and a heap tensor handle, each
            // taken over exactly once.
            unsafe {
                let name_ptr = *names.add(i);
                let name = CStr::from_ptr(name_ptr).to_string_lossy().into_owned();
                dpt_free_string(name_ptr);
                out.push((name, Tensor::from_ptr(*tensors.add(i))));
            }
        }
        // SAFETY: the arrays themselves were malloc'ed by the shim (also when n == 0).
        unsafe {
            dpt_free_array(names.cast());
            dpt_free_array(tensors.cast());
        }
        Ok(out)
    }

    /// The trainable parameters, with their dotted names (`conv1.weight`), in module order.
    /// The tensors are the module's own: changing their data changes the module.
    pub fn named_parameters(&self) -> Result<Vec<(String, Tensor)>, C10dError> {
        self.named(false)
    }

    /// The buffers (BatchNorm statistics and kin), as the parameters.
    pub fn named_buffers(&self) -> Result<Vec<(String, Tensor)>, C10dError> {
        self.named(true)
    }

    /// Training (dropout on, batch statistics) or evaluation mode, for every submodule.
    pub fn set_train(&self, on: bool) -> Result<(), C10dError> {
        // SAFETY: live handle; the type is not Sync, so no other thread uses it now.
        call(|err| unsafe { dpt_jit_set_train(self.0.as_ptr(), i32::from(on), err) }).map(drop)
    }

    /// `forward(inputs...)`: the tensor it returns, or each tensor of the tuple or list it
    /// returns, in order.
    pub fn forward(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>, C10dError> {
        let mut own: Vec<Tensor> = inputs.iter().map(|t| t.shallow_clone()).collect();
        let raw: Vec<*mut CTensor> = own.iter_mut().map(|t| t.as_mut_ptr()).collect();
        let mut outputs: *mut *mut CTensor = std::ptr::null_mut();
        // SAFETY: live handle; `raw` holds `own.len()` live tensor handles for the call; on
        // success the shim fills a malloc'ed array of `n` new tensor handles we now own.
        let n = call(|err| unsafe {
            dpt_jit_forward(self.0.as_ptr(), raw.as_ptr(), raw.len(), &mut outputs, err)
        })?;
        let out = (0..n)
            // SAFETY: entries 0..n are fresh heap tensor handles, each taken over once.
            .map(|i| unsafe { Tensor::from_ptr(*outputs.add(i)) })
            .collect();
        // SAFETY: the array itself was malloc'ed by the shim.
        unsafe { dpt_free_array(outputs.cast()) };
        Ok(out)
    }

    /// How many inputs `forward` takes (its schema's arguments besides `self`).
    pub fn forward_inputs(&self) -> Result<usize, C10dError> {
        // SAFETY: live handle.
        let n = call(|err| unsafe { dpt_jit_forward_inputs(self.0.as_ptr(), err) })?;
        usize::try_from(n).map_err(|_| C10dError("forward's schema could not be read".into()))
    }

    /// Writes the module (code and current weights) to `path`, loadable with `torch.jit.load`.
    pub fn save(&self, path: &Path) -> Result<(), C10dError> {
        let p = c_path(path)?;
        // SAFETY: live handle, NUL-terminated path.
        call(|err| unsafe { dpt_jit_save(self.0.as_ptr(), p.as_ptr(), err) }).map(drop)
    }

    /// Whether the module's code draws random numbers (dropout, bernoulli, rand…).
    pub fn uses_randomness(&self) -> Result<bool, C10dError> {
        // SAFETY: live handle.
        call(|err| unsafe { dpt_jit_uses_randomness(self.0.as_ptr(), err) }).map(|r| r == 1)
    }
}

impl Drop for ScriptModule {
    fn drop(&mut self) {
        // SAFETY: we own the handle.
        unsafe { dpt_jit_free(self.0.as_ptr()) }
    }
}
