//! A plugin's reads of regular files, on the thread that runs the plugin.
//!
//! wasmtime-wasi runs every `descriptor.read` on tokio's blocking pool: a hand-off to
//! another thread and back per read, tens of microseconds on these machines. For
//! file-pulse streaming a file in 32 KiB reads that was about half of its poll time. A
//! read of a regular file is bounded (the page cache or the disk), like the guest's own
//! work between two awaits, so it runs where the guest runs. A read of anything else (a
//! device, whose read may never return; a FIFO, which refuses a positional read) still
//! goes to the blocking pool as before, so a plugin stuck on one holds no worker thread
//! and is abandoned at its call deadline.

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::WasiView;
use wasmtime_wasi::filesystem::Descriptor;
use wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode;

/// The interface whose `descriptor.read` is replaced, as wasmtime-wasi registers it (a
/// plugin importing an earlier 0.2 version is linked to it by semver).
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// wasmtime-wasi's cap on one read, kept so a plugin sees the same short reads.
const READ_MAX: usize = 64 << 10;

/// Replaces `[method]descriptor.read` of `wasi:filesystem/types` in a linker that has
/// wasmtime-wasi's bindings (`add_to_linker_async`) already.
pub fn read_regular_files_inline<T: WasiView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let defined = linker.instance(FILESYSTEM_TYPES)?.func_wrap_async(
        "[method]descriptor.read",
        |mut store, (descriptor, len, offset): (Resource<Descriptor>, u64, u64)| {
            Box::new(async move {
                let file = match store.data_mut().ctx().table.get(&descriptor)? {
                    Descriptor::File(file) => file.file.clone(),
                    Descriptor::Dir(_) => return Ok((Err(ErrorCode::BadDescriptor),)),
                };
                let regular = file.metadata().is_ok_and(|metadata| metadata.is_file());
                let (mut buffer, read) = if regular {
                    read_at(&file, len, offset)
                } else {
                    tokio::task::spawn_blocking(move || read_at(&file, len, offset)).await?
                };
                Ok((match read {
                    Ok(read) => {
                        buffer.truncate(read);
                        Ok((buffer, read == 0))
                    }
                    Err(error) => Err(ErrorCode::from(error)),
                },))
            })
        },
    );
    linker.allow_shadowing(false);
    defined
}

/// What wasmtime-wasi's read does: up to `len` (at most [`READ_MAX`]) bytes at `offset`.
fn read_at(file: &std::fs::File, len: u64, offset: u64) -> (Vec<u8>, std::io::Result<usize>) {
    use std::os::unix::fs::FileExt;
    let mut buffer = vec![0; usize::try_from(len).unwrap_or(usize::MAX).min(READ_MAX)];
    let read = file.read_at(&mut buffer, offset);
    (buffer, read)
}
