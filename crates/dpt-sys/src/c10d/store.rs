//! c10d's TCPStore and PrefixStore: the key-value store the ranks meet at, and the one their
//! process groups are made over.

use std::ffi::c_char;
use std::ptr::NonNull;
use std::time::Duration;

use super::{c_string, call, millis, non_null, C10dError};

#[repr(C)]
pub(super) struct RawStore {
    _private: [u8; 0],
}

extern "C" {
    fn dpt_free_bytes(b: *mut u8);
    fn dpt_tcp_store(
        host: *const c_char,
        port: u16,
        world_size: i32,
        is_server: i32,
        timeout_ms: i64,
        err: *mut *mut c_char,
    ) -> *mut RawStore;
    fn dpt_prefix_store(prefix: *const c_char, base: *mut RawStore, err: *mut *mut c_char) -> *mut RawStore;
    fn dpt_store_free(s: *mut RawStore);
    fn dpt_store_set(
        s: *mut RawStore,
        key: *const c_char,
        data: *const u8,
        len: usize,
        err: *mut *mut c_char,
    ) -> i32;
    fn dpt_store_get(
        s: *mut RawStore,
        key: *const c_char,
        out: *mut *mut u8,
        len: *mut usize,
        err: *mut *mut c_char,
    ) -> i32;
    fn dpt_store_add(s: *mut RawStore, key: *const c_char, value: i64, err: *mut *mut c_char) -> i64;
    fn dpt_store_wait(
        s: *mut RawStore,
        keys: *const *const c_char,
        n: usize,
        timeout_ms: i64,
        err: *mut *mut c_char,
    ) -> i32;
    fn dpt_store_check(s: *mut RawStore, keys: *const *const c_char, n: usize, err: *mut *mut c_char) -> i32;
}

/// A c10d key-value store (a TCPStore, or a prefixed view of one).
pub struct Store(pub(super) NonNull<RawStore>);

// SAFETY: c10d stores are thread-safe (TCPStore serializes its client socket).
unsafe impl Send for Store {}
unsafe impl Sync for Store {}

impl Store {
    /// Connects to the TCPStore at `host:port`, or hosts it (`server`), waiting up to
    /// `timeout` for the connection and for each later operation.
    pub fn tcp(
        host: &str,
        port: u16,
        world_size: usize,
        server: bool,
        timeout: Duration,
    ) -> Result<Store, C10dError> {
        let host = c_string(host)?;
        let world = i32::try_from(world_size).map_err(|_| C10dError("world size too large".into()))?;
        // SAFETY: valid C string; the shim returns an owned handle or null with an error.
        let p = call(|err| unsafe {
            dpt_tcp_store(host.as_ptr(), port, world, i32::from(server), millis(timeout), err)
        })?;
        Ok(Store(non_null(p, "TCPStore")?))
    }

    /// A view of this store whose keys all start with `prefix`.
    pub fn prefixed(&self, prefix: &str) -> Result<Store, C10dError> {
        let prefix = c_string(prefix)?;
        // SAFETY: `self.0` is a live handle; the new one holds its own reference.
        let p = call(|err| unsafe { dpt_prefix_store(prefix.as_ptr(), self.0.as_ptr(), err) })?;
        Ok(Store(non_null(p, "PrefixStore")?))
    }

    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), C10dError> {
        let key = c_string(key)?;
        // SAFETY: live handle, valid key, `value` readable for its length.
        call(|err| unsafe { dpt_store_set(self.0.as_ptr(), key.as_ptr(), value.as_ptr(), value.len(), err) })
            .map(drop)
    }

    /// The value of `key`, waiting for it up to the store's timeout.
    pub fn get(&self, key: &str) -> Result<Vec<u8>, C10dError> {
        let key = c_string(key)?;
        let (mut out, mut len) = (std::ptr::null_mut::<u8>(), 0usize);
        // SAFETY: live handle; on success the shim hands over a malloc'ed buffer of `len` bytes.
        call(|err| unsafe { dpt_store_get(self.0.as_ptr(), key.as_ptr(), &mut out, &mut len, err) })?;
        if out.is_null() {
            return Err(C10dError("store get returned nothing".into()));
        }
        // SAFETY: `out` holds `len` initialized bytes; we copy them and free the buffer.
        let bytes = unsafe {
            let v = std::slice::from_raw_parts(out, len).to_vec();
            dpt_free_bytes(out);
            v
        };
        Ok(bytes)
    }

    /// Adds `value` to the counter `key` (created at 0); returns the new value.
    pub fn add(&self, key: &str, value: i64) -> Result<i64, C10dError> {
        let key = c_string(key)?;
        // SAFETY: live handle, valid key.
        call(|err| unsafe { dpt_store_add(self.0.as_ptr(), key.as_ptr(), value, err) })
    }

    /// Waits until every key exists, up to `timeout`.
    pub fn wait(&self, keys: &[&str], timeout: Duration) -> Result<(), C10dError> {
        let owned = keys.iter().map(|k| c_string(k)).collect::<Result<Vec<_>, _>>()?;
        let ptrs: Vec<*const c_char> = owned.iter().map(|k| k.as_ptr()).collect();
        // SAFETY: live handle; `ptrs` points at `owned`, alive for the call.
        call(|err| unsafe {
            dpt_store_wait(self.0.as_ptr(), ptrs.as_ptr(), ptrs.len(), millis(timeout), err)
        })
        .map(drop)
    }

    /// Whether every key exists now.
    pub fn check(&self, keys: &[&str]) -> Result<bool, C10dError> {
        let owned = keys.iter().map(|k| c_string(k)).collect::<Result<Vec<_>, _>>()?;
        let ptrs: Vec<*const c_char> = owned.iter().map(|k| k.as_ptr()).collect();
        // SAFETY: as in `wait`.
        call(|err| unsafe { dpt_store_check(self.0.as_ptr(), ptrs.as_ptr(), ptrs.len(), err) })
            .map(|v| v == 1)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        // SAFETY: we own the handle.
        unsafe { dpt_store_free(self.0.as_ptr()) }
    }
}
