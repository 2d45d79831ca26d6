//! Ownership of device memory during a replay: every allocation the runner makes goes
//! through a [`Session`], which remembers it and frees whatever is still allocated when it
//! is dropped — on success, on error, on Ctrl-C (the runner returns early) and on panic
//! (unwinding). Kernels are launched only on ranges inside an allocation this session
//! owns, so the runner can never write another process's (or another buffer's) memory.

use crate::backend::{DevicePtr, GpuBackend, GpuError};
use std::collections::BTreeMap;
use thiserror::Error;

/// A kernel was asked to touch memory this session does not own.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("range {ptr:#x}+{bytes} is not inside an allocation owned by this replay")]
pub struct NotOwned {
    pub ptr: DevicePtr,
    pub bytes: u64,
}

/// Errors of session operations.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SessionError {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    NotOwned(#[from] NotOwned),
}

/// The allocations of one replay on one backend.
pub struct Session<'a> {
    dev: &'a mut dyn GpuBackend,
    live: BTreeMap<DevicePtr, u64>,
    /// Frees that failed during `free_all`/drop (reported, never retried).
    pub cleanup_errors: Vec<GpuError>,
}

impl<'a> Session<'a> {
    pub fn new(dev: &'a mut dyn GpuBackend) -> Self {
        Session {
            dev,
            live: BTreeMap::new(),
            cleanup_errors: Vec::new(),
        }
    }

    /// The backend, for calls that allocate nothing (memory info, timers, sync).
    pub fn device(&mut self) -> &mut dyn GpuBackend {
        self.dev
    }

    /// Allocates and remembers.
    pub fn alloc(&mut self, bytes: u64) -> Result<DevicePtr, GpuError> {
        let p = self.dev.alloc(bytes)?;
        self.live.insert(p, bytes);
        Ok(p)
    }

    /// Frees an allocation of this session.
    pub fn free(&mut self, ptr: DevicePtr) -> Result<(), SessionError> {
        if !self.live.contains_key(&ptr) {
            return Err(NotOwned { ptr, bytes: 0 }.into());
        }
        self.dev.free(ptr)?;
        self.live.remove(&ptr);
        Ok(())
    }

    /// Number and bytes of allocations still held.
    pub fn live(&self) -> (usize, u64) {
        (self.live.len(), self.live.values().sum())
    }

    /// Checks that `[ptr, ptr+bytes)` lies inside one owned allocation.
    pub fn check_owned(&self, ptr: DevicePtr, bytes: u64) -> Result<(), NotOwned> {
        let err = NotOwned { ptr, bytes };
        let (&base, &len) = self.live.range(..=ptr).next_back().ok_or(err.clone())?;
        let end = ptr.checked_add(bytes).ok_or(err.clone())?;
        if end <= base + len {
            Ok(())
        } else {
            Err(err)
        }
    }

    pub fn touch(&mut self, ptr: DevicePtr, bytes: u64, seed: u32) -> Result<(), SessionError> {
        self.check_owned(ptr, bytes)?;
        Ok(self.dev.touch(ptr, bytes, seed)?)
    }

    pub fn checksum(&mut self, ptr: DevicePtr, bytes: u64, seed: u32) -> Result<u64, SessionError> {
        self.check_owned(ptr, bytes)?;
        Ok(self.dev.checksum(ptr, bytes, seed)?)
    }

    pub fn strided(
        &mut self,
        ptr: DevicePtr,
        bytes: u64,
        stride: u64,
        passes: u32,
    ) -> Result<(), SessionError> {
        self.check_owned(ptr, bytes)?;
        Ok(self.dev.strided(ptr, bytes, stride, passes)?)
    }

    pub fn copy(&mut self, dst: DevicePtr, src: DevicePtr, bytes: u64) -> Result<(), SessionError> {
        self.check_owned(dst, bytes)?;
        self.check_owned(src, bytes)?;
        Ok(self.dev.copy(dst, src, bytes)?)
    }

    /// Frees everything still held (newest first); returns how many were freed. Failures
    /// are kept in `cleanup_errors` and do not stop the other frees.
    pub fn free_all(&mut self) -> usize {
        // Wait for kernels still running on these buffers first; an error here is kept.
        if let Err(e) = self.dev.synchronize() {
            self.cleanup_errors.push(e);
        }
        let mut n = 0;
        while let Some((ptr, _)) = self.live.pop_last() {
            match self.dev.free(ptr) {
                Ok(()) => n += 1,
                Err(e) => self.cleanup_errors.push(e),
            }
        }
        n
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        if !self.live.is_empty() {
            self.free_all();
        }
    }
}
