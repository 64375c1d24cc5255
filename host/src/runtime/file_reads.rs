//! A plugin's reads of regular files and its `stat` of an open descriptor, on the thread
//! that runs the plugin.
//!
//! wasmtime-wasi runs every `descriptor.read` and `descriptor.stat` on tokio's blocking
//! pool: a hand-off to another thread and back per call, tens of microseconds on these
//! machines when a core is free, and up to milliseconds when the woken thread queues
//! behind a busy one (as when a delivery runs beside the poll). For file-pulse streaming
//! a file in 32 KiB reads the reads were about half of its poll time; with them inline,
//! its few `stat`s a poll still took two thirds of it (`sluice run` of a 200 MiB file to
//! stdout: poll time 1.77 s inline reads only, 0.61 s with `stat` inline too). A read of a
//! regular file is bounded (the page cache or the disk), like the guest's own work
//! between two awaits, so it runs where the guest runs; so is `fstat` of any open
//! descriptor, which never waits for data. A read of anything else (a device, whose read
//! may never return; a FIFO, which refuses a positional read) still goes to the blocking
//! pool as before, so a plugin stuck on one holds no worker thread and is abandoned at
//! its call deadline; so do calls that resolve a path or open a file.
//!
//! Opening a FIFO waits for its writer, in the kernel, where no deadline reaches: the
//! thread is never given back (a plugin that retried it would take the whole blocking
//! pool, and with it every file call of every plugin). `descriptor.open-at` of a FIFO is
//! refused (`would-block`) after a `stat-at` of the path, through the same grants; the
//! rest is wasmtime-wasi's open.

use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::WasiView;
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::clocks::wall_clock::Datetime;
use wasmtime_wasi::p2::bindings::filesystem::types::{
    DescriptorFlags, DescriptorStat, DescriptorType, ErrorCode, HostDescriptor, OpenFlags, PathFlags,
};

/// The interface whose `descriptor.read`, `descriptor.stat` and `descriptor.open-at` are
/// replaced, as wasmtime-wasi registers it (a plugin importing an earlier 0.2 version is
/// linked to it by semver).
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// wasmtime-wasi's cap on one read, kept so a plugin sees the same short reads.
const READ_MAX: usize = 64 << 10;

/// Replaces `[method]descriptor.read`, `[method]descriptor.stat` and
/// `[method]descriptor.open-at` of `wasi:filesystem/types` in a linker that has
/// wasmtime-wasi's bindings (`add_to_linker_async`) already.
pub fn replace_file_calls<T: WasiView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let defined = replace_read(linker).and_then(|()| replace_stat(linker)).and_then(|()| refuse_fifo_opens(linker));
    linker.allow_shadowing(false);
    defined
}

/// `[method]descriptor.open-at`, but a FIFO (or socket) at the path is refused with
/// `would-block` rather than opened (see the module's header).
fn refuse_fifo_opens<T: WasiView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    type Params = (Resource<Descriptor>, PathFlags, String, OpenFlags, DescriptorFlags);
    linker.instance(FILESYSTEM_TYPES)?.func_wrap_async(
        "[method]descriptor.open-at",
        |mut store, (dir, path_flags, path, open_flags, flags): Params| {
            Box::new(async move {
                let mut view = store.data_mut().filesystem();
                let at = Resource::<Descriptor>::new_borrow(dir.rep());
                // What `stat-at` cannot tell (not found, not a directory) the open says.
                if let Ok(stat) = view.stat_at(at, path_flags, path.clone()).await
                    && stat.type_ == DescriptorType::Unknown
                {
                    return Ok((Err(ErrorCode::WouldBlock),));
                }
                Ok((match view.open_at(dir, path_flags, path, open_flags, flags).await {
                    Ok(opened) => Ok(opened),
                    Err(error) => Err(error.downcast()?),
                },))
            })
        },
    )
}

fn replace_stat<T: WasiView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.instance(FILESYSTEM_TYPES)?.func_wrap(
        "[method]descriptor.stat",
        |mut store, (descriptor,): (Resource<Descriptor>,)| {
            let file = match store.data_mut().ctx().table.get(&descriptor)? {
                Descriptor::File(file) => file.file.clone(),
                Descriptor::Dir(dir) => dir.dir.clone(),
            };
            Ok((file.metadata().map(|metadata| descriptor_stat(&metadata)).map_err(ErrorCode::from),))
        },
    )
}

/// What wasmtime-wasi's `stat` answers for `metadata` (on Unix: the type, link count,
/// size, and the access, modification and birth times, each absent before 1970).
fn descriptor_stat(metadata: &std::fs::Metadata) -> DescriptorStat {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let kind = metadata.file_type();
    let type_ = if kind.is_dir() {
        DescriptorType::Directory
    } else if kind.is_symlink() {
        DescriptorType::SymbolicLink
    } else if kind.is_file() {
        DescriptorType::RegularFile
    } else if kind.is_block_device() {
        DescriptorType::BlockDevice
    } else if kind.is_char_device() {
        DescriptorType::CharacterDevice
    } else {
        DescriptorType::Unknown
    };
    let time = |time: std::io::Result<std::time::SystemTime>| time.ok().and_then(|t| Datetime::try_from(t).ok());
    DescriptorStat {
        type_,
        link_count: metadata.nlink(),
        size: metadata.len(),
        data_access_timestamp: time(metadata.accessed()),
        data_modification_timestamp: time(metadata.modified()),
        status_change_timestamp: time(metadata.created()),
    }
}

fn replace_read<T: WasiView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    linker.instance(FILESYSTEM_TYPES)?.func_wrap_async(
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
    )
}

/// What wasmtime-wasi's read does: up to `len` (at most [`READ_MAX`]) bytes at `offset`.
fn read_at(file: &std::fs::File, len: u64, offset: u64) -> (Vec<u8>, std::io::Result<usize>) {
    use std::os::unix::fs::FileExt;
    let mut buffer = vec![0; usize::try_from(len).unwrap_or(usize::MAX).min(READ_MAX)];
    let read = file.read_at(&mut buffer, offset);
    (buffer, read)
}
