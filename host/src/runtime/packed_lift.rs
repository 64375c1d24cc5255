//! How a 0.3.0 or 0.4.0 plugin's `poll-batch` crosses into the host: [`LiftedBatch`] and
//! [`LiftedBatch04`], lifted by wasmtime like any record except for their three large lists.
//! `data` (every record's bytes) is copied out of the guest's memory in one `memcpy`;
//! 0.3.0's `records` and `headers` are read from their fixed canonical-ABI layouts (72 and
//! 16 bytes an element), and 0.4.0's from the byte lists in the layouts its WIT documents
//! (52 and 16 bytes). Every span, index and option is still checked by the host
//! afterwards, as before.
//!
//! Why: wasmtime lifts a `list<u8>` through a per-element iterator (a 16-byte copy loop)
//! and a list of records field by field, working out each field's place as it goes.
//! Measured with `perf` on `sluice-bench poll`, the lifts took about as long as the
//! plugin's own work for 1 KiB records and twice as long for 16 KiB records.
//!
//! This implements wasmtime's `ComponentType` and `Lift` for one list type
//! ([`PackedList`]); both traits' methods are public but hidden from wasmtime's docs, so a
//! wasmtime upgrade may need this module changed (its unit test checks the layout it reads
//! against wasmtime's own).

use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext};
use wasmtime::component::{ComponentType, Lift};
use wasmtime::{Result, ValRaw, format_err};

use super::bindings::{BatchHeader, BatchRecord, PollBatch, Span};

/// 0.3.0's `poll-batch`, lifted with [`PackedList`] for its large lists.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct LiftedBatch {
    partitions: Vec<String>,
    topics: Vec<String>,
    data: PackedList<u8>,
    headers: PackedList<BatchHeader>,
    records: PackedList<BatchRecord>,
    done: bool,
}

impl From<LiftedBatch> for PollBatch {
    fn from(batch: LiftedBatch) -> PollBatch {
        PollBatch {
            partitions: batch.partitions,
            topics: batch.topics,
            data: batch.data.0,
            headers: batch.headers.0,
            records: batch.records.0,
            done: batch.done,
        }
    }
}

/// 0.4.0's `poll-batch`: records and headers are byte lists in fixed layouts.
#[derive(ComponentType, Lift)]
#[component(record)]
pub struct LiftedBatch04 {
    partitions: Vec<String>,
    topics: Vec<String>,
    data: PackedList<u8>,
    headers: PackedBytes<BatchHeader>,
    records: PackedBytes<BatchRecord>,
    done: bool,
}

impl From<LiftedBatch04> for PollBatch {
    fn from(batch: LiftedBatch04) -> PollBatch {
        PollBatch {
            partitions: batch.partitions,
            topics: batch.topics,
            data: batch.data.0,
            headers: batch.headers.0,
            records: batch.records.0,
            done: batch.done,
        }
    }
}

/// A list of a fixed-layout element type, read from the guest's memory by [`Fixed`].
pub struct PackedList<T>(pub Vec<T>);

/// An element type whose canonical layout is read by hand.
trait Fixed: Sized + ComponentType {
    const SIZE: usize;
    const ALIGN: usize;
    fn read(bytes: &[u8]) -> Result<Self>;

    /// Every element of a list's bytes.
    fn read_all(bytes: &[u8]) -> Result<Vec<Self>> {
        bytes.chunks_exact(Self::SIZE).map(Self::read).collect()
    }
}

/// A `list<u8>`: copied out of the guest's memory in one go.
impl Fixed for u8 {
    const SIZE: usize = 1;
    const ALIGN: usize = 1;

    fn read(bytes: &[u8]) -> Result<u8> {
        Ok(bytes[0])
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<u8>> {
        Ok(bytes.to_vec())
    }
}

unsafe impl<T: Fixed> ComponentType for PackedList<T> {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> Result<()> {
        // Also checks that the element is the record of 0.3.0 whose layout `T::read` reads.
        <Vec<T> as ComponentType>::typecheck(ty, types)
    }
}

unsafe impl<T: Fixed> Lift for PackedList<T> {
    fn linear_lift_from_flat(cx: &mut LiftContext<'_>, _ty: InterfaceType, src: &Self::Lower) -> Result<Self> {
        lift_list(cx, src[0].get_u32(), src[1].get_u32())
    }

    fn linear_lift_from_memory(cx: &mut LiftContext<'_>, _ty: InterfaceType, bytes: &[u8]) -> Result<Self> {
        // A list in memory: its pointer and length, two little-endian `u32`s.
        lift_list(cx, u32_at(bytes, 0), u32_at(bytes, 4))
    }
}

/// The list of `len` elements at `ptr`, refused when misaligned or as [`guest_bytes`]
/// refuses it.
fn lift_list<T: Fixed>(cx: &mut LiftContext<'_>, ptr: u32, len: u32) -> Result<PackedList<T>> {
    let len = len as usize;
    let bytes = guest_bytes::<T>(cx, ptr, len.checked_mul(T::SIZE), len)?;
    if !(ptr as usize).is_multiple_of(T::ALIGN) {
        return Err(format_err!("list pointer is not aligned"));
    }
    T::read_all(bytes).map(PackedList)
}

/// The `len` bytes at `ptr` of the guest's memory that hold `count` elements, refused as
/// wasmtime refuses a list: out of the guest's memory, or (the call's *hostcall fuel*,
/// which `sandbox.memory.max.bytes` sets) more than the host may copy out of one call, as
/// `count` host values of type `T`. `len` is `None` when its computation overflowed.
fn guest_bytes<'a, T>(cx: &mut LiftContext<'a>, ptr: u32, len: Option<usize>, count: usize) -> Result<&'a [u8]> {
    let bytes = len
        .and_then(|len| cx.memory().get(ptr as usize..)?.get(..len))
        .ok_or_else(|| format_err!("list pointer/length out of bounds of memory"))?;
    cx.consume_fuel_array(count, std::mem::size_of::<T>())?;
    Ok(bytes)
}

/// A `list<u8>` of 0.4.0 that holds elements of a fixed little-endian layout, read from
/// the guest's memory by [`Bytes04`] without copying the bytes first.
pub struct PackedBytes<T>(pub Vec<T>);

/// An element of a 0.4.0 byte list: `SIZE` bytes, read by `read` (which names the element
/// by its index when it is refused).
trait Bytes04: Sized + Send + Sync + 'static {
    const SIZE: usize;
    const WHAT: &'static str;
    fn read(bytes: &[u8], index: usize) -> Result<Self>;

    /// Every element of a list of whole elements.
    fn read_all(bytes: &[u8]) -> Result<Vec<Self>> {
        bytes.chunks_exact(Self::SIZE).enumerate().map(|(index, element)| Self::read(element, index)).collect()
    }
}

unsafe impl<T: Bytes04> ComponentType for PackedBytes<T> {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> Result<()> {
        <Vec<u8> as ComponentType>::typecheck(ty, types)
    }
}

unsafe impl<T: Bytes04> Lift for PackedBytes<T> {
    fn linear_lift_from_flat(cx: &mut LiftContext<'_>, _ty: InterfaceType, src: &Self::Lower) -> Result<Self> {
        lift_bytes(cx, src[0].get_u32(), src[1].get_u32())
    }

    fn linear_lift_from_memory(cx: &mut LiftContext<'_>, _ty: InterfaceType, bytes: &[u8]) -> Result<Self> {
        lift_bytes(cx, u32_at(bytes, 0), u32_at(bytes, 4))
    }
}

/// The `len` bytes at `ptr` as elements of `T`, refused when not a whole number of
/// elements or as [`guest_bytes`] refuses them.
fn lift_bytes<T: Bytes04>(cx: &mut LiftContext<'_>, ptr: u32, len: u32) -> Result<PackedBytes<T>> {
    let len = len as usize;
    let bytes = guest_bytes::<T>(cx, ptr, Some(len), len / T::SIZE)?;
    if !len.is_multiple_of(T::SIZE) {
        return Err(format_err!(
            "the batch's {what} are {len} bytes, not a whole number of {size}-byte {what} (sluice:connector@0.4.0)",
            what = T::WHAT,
            size = T::SIZE
        ));
    }
    T::read_all(bytes).map(PackedBytes)
}

/// Flags of a 0.4.0 record (word 0).
const HAS_TOPIC: u32 = 1;
const HAS_KEY: u32 = 2;
const HAS_VALUE: u32 = 4;
const HAS_TIMESTAMP: u32 = 8;

/// 0.4.0's header: four `u32`s, the same as 0.3.0's canonical layout.
impl Bytes04 for BatchHeader {
    const SIZE: usize = 16;
    const WHAT: &'static str = "headers";

    fn read(bytes: &[u8], _index: usize) -> Result<BatchHeader> {
        <BatchHeader as Fixed>::read(bytes)
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<BatchHeader>> {
        <BatchHeader as Fixed>::read_all(bytes)
    }
}

/// 0.4.0's record: thirteen `u32`s (flags, partition, topic, offset, key, value, headers,
/// timestamp), each option read only when its flag is set.
impl Bytes04 for BatchRecord {
    const SIZE: usize = RECORD_04;
    const WHAT: &'static str = "records";

    fn read(bytes: &[u8], index: usize) -> Result<BatchRecord> {
        let array = bytes.try_into().map_err(|_| format_err!("a 0.4.0 record is {RECORD_04} bytes"))?;
        check_flags_04(index, array)?;
        Ok(read_record_04(array))
    }

    /// Flags checked in a pass of their own, then an infallible map of known length (one
    /// allocation; see the 0.3.0 `read_all`).
    fn read_all(bytes: &[u8]) -> Result<Vec<BatchRecord>> {
        let (records, _) = bytes.as_chunks::<RECORD_04>();
        records.iter().enumerate().try_for_each(|(index, record)| check_flags_04(index, record))?;
        Ok(records.iter().map(read_record_04).collect())
    }
}

/// Record `index`'s flags are ones [`read_record_04`] knows.
fn check_flags_04(index: usize, record: &[u8; RECORD_04]) -> Result<()> {
    let flags = word_04(record, 0);
    if flags & !KNOWN_FLAGS != 0 {
        return Err(format_err!(
            "record {index} of the batch has unknown flags {flags:#x} (sluice:connector@0.4.0 knows 0x1 topic, 0x2 key, 0x4 value, 0x8 timestamp)"
        ));
    }
    Ok(())
}

const RECORD_04: usize = 52;
const KNOWN_FLAGS: u32 = HAS_TOPIC | HAS_KEY | HAS_VALUE | HAS_TIMESTAMP;

/// Word `at` of a 0.4.0 record.
fn word_04(bytes: &[u8; RECORD_04], at: usize) -> u32 {
    let at = at * 4;
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// A record whose flags are known.
fn read_record_04(bytes: &[u8; RECORD_04]) -> BatchRecord {
    let word = |at: usize| word_04(bytes, at);
    let span = |at: usize| Span { start: word(at), len: word(at + 1) };
    let flags = word(0);
    let has = |flag: u32| flags & flag != 0;
    BatchRecord {
        partition: word(1),
        topic: has(HAS_TOPIC).then(|| word(2)),
        offset: span(3),
        key: has(HAS_KEY).then(|| span(5)),
        value: has(HAS_VALUE).then(|| span(7)),
        headers: span(9),
        timestamp: has(HAS_TIMESTAMP).then(|| i64::from(word(11)) | (i64::from(word(12)) << 32)),
    }
}

/// Where each field of a `batch-record` sits in its canonical layout (the byte of an
/// option's discriminant, its payload after it).
struct RecordLayout {
    size: usize,
    align: usize,
    partition: usize,
    offset: usize,
    topic: usize,
    topic_value: usize,
    key: usize,
    key_value: usize,
    value: usize,
    value_value: usize,
    headers: usize,
    timestamp: usize,
    timestamp_value: usize,
}

/// `partition: u32, offset: span, topic: option<u32>, key: option<span>,
/// value: option<span>, headers: span, timestamp: option<s64>` laid out by the canonical
/// ABI: each field at the next multiple of its alignment, an option's payload aligned after
/// its one-byte discriminant, the record padded to its largest alignment (8).
const RECORD: RecordLayout = RecordLayout {
    size: 72,
    align: 8,
    partition: 0,
    offset: 4,
    topic: 12,
    topic_value: 16,
    key: 20,
    key_value: 24,
    value: 32,
    value_value: 36,
    headers: 44,
    timestamp: 56,
    timestamp_value: 64,
};

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("four bytes"))
}

fn span_at(bytes: &[u8], at: usize) -> Span {
    Span { start: u32_at(bytes, at), len: u32_at(bytes, at + 4) }
}

/// `key: span, value: span`.
impl Fixed for BatchHeader {
    const SIZE: usize = 16;
    const ALIGN: usize = 4;

    fn read(bytes: &[u8]) -> Result<BatchHeader> {
        Ok(BatchHeader { key: span_at(bytes, 0), value: span_at(bytes, 8) })
    }

    /// Infallible, so the `Vec` is allocated once (see `BatchRecord`'s).
    fn read_all(bytes: &[u8]) -> Result<Vec<BatchHeader>> {
        Ok(bytes
            .chunks_exact(<Self as Fixed>::SIZE)
            .map(|h| BatchHeader { key: span_at(h, 0), value: span_at(h, 8) })
            .collect())
    }
}

impl Fixed for BatchRecord {
    const SIZE: usize = RECORD.size;
    const ALIGN: usize = RECORD.align;

    fn read(bytes: &[u8]) -> Result<BatchRecord> {
        let record = bytes.try_into().map_err(|_| format_err!("a batch record is {} bytes", RECORD.size))?;
        check_discriminants(record)?;
        Ok(read_record(record))
    }

    /// As fixed-size arrays: each field's read then needs no bounds check (in a profile
    /// of `sluice-bench poll`, reading records through `chunks_exact` was a tenth of the
    /// component's time). The discriminants are checked in a pass of their own so that
    /// the reads cannot fail: collecting `Result`s grows the `Vec` record by record
    /// (nine reallocations and copies for 500 records, an eighth of the component's time),
    /// an infallible map of known length allocates it once.
    fn read_all(bytes: &[u8]) -> Result<Vec<BatchRecord>> {
        let (records, _) = bytes.as_chunks::<{ RECORD.size }>();
        records.iter().try_for_each(check_discriminants)?;
        Ok(records.iter().map(read_record).collect())
    }
}

/// Every option's discriminant is 0 or 1, as [`read_record`] takes them to be.
fn check_discriminants(record: &[u8; RECORD.size]) -> Result<()> {
    match [RECORD.topic, RECORD.key, RECORD.value, RECORD.timestamp].iter().all(|&at| record[at] <= 1) {
        true => Ok(()),
        false => Err(format_err!("invalid option discriminant")),
    }
}

/// A record whose option discriminants are known to be 0 or 1.
fn read_record(bytes: &[u8; RECORD.size]) -> BatchRecord {
    let u32_at = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    let span_at = |at: usize| Span { start: u32_at(at), len: u32_at(at + 4) };
    let present = |at: usize| bytes[at] != 0;
    let timestamp = || {
        let at = RECORD.timestamp_value;
        let mut eight = [0u8; 8];
        eight.copy_from_slice(&bytes[at..at + 8]);
        i64::from_le_bytes(eight)
    };
    BatchRecord {
        partition: u32_at(RECORD.partition),
        offset: span_at(RECORD.offset),
        topic: present(RECORD.topic).then(|| u32_at(RECORD.topic_value)),
        key: present(RECORD.key).then(|| span_at(RECORD.key_value)),
        value: present(RECORD.value).then(|| span_at(RECORD.value_value)),
        headers: span_at(RECORD.headers),
        timestamp: present(RECORD.timestamp).then(timestamp),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout read above is the one wasmtime computes from the fields' types.
    #[test]
    fn the_record_layout_is_wasmtimes() {
        let fields = [
            <u32 as ComponentType>::ABI,
            <Span as ComponentType>::ABI,
            <Option<u32> as ComponentType>::ABI,
            <Option<Span> as ComponentType>::ABI,
            <Option<Span> as ComponentType>::ABI,
            <Span as ComponentType>::ABI,
            <Option<i64> as ComponentType>::ABI,
        ];
        let mut at = 0u32;
        let starts: Vec<usize> = fields.iter().map(|abi| abi.next_field32(&mut at) as usize).collect();
        let record = <BatchRecord as ComponentType>::ABI;
        assert_eq!((record.size32 as usize, record.align32 as usize), (RECORD.size, RECORD.align));
        assert_eq!(
            starts,
            [RECORD.partition, RECORD.offset, RECORD.topic, RECORD.key, RECORD.value, RECORD.headers, RECORD.timestamp]
        );
        // An option's payload follows its discriminant at the payload's alignment.
        let payload = |option: usize, abi: CanonicalAbiInfo| {
            let mut at = option as u32 + 1;
            abi.next_field32(&mut at) as usize
        };
        assert_eq!(payload(RECORD.topic, <u32 as ComponentType>::ABI), RECORD.topic_value);
        assert_eq!(payload(RECORD.key, <Span as ComponentType>::ABI), RECORD.key_value);
        assert_eq!(payload(RECORD.value, <Span as ComponentType>::ABI), RECORD.value_value);
        assert_eq!(payload(RECORD.timestamp, <i64 as ComponentType>::ABI), RECORD.timestamp_value);
        assert_eq!(<Option<Span> as ComponentType>::ABI.size32, 12);
        let header = <BatchHeader as ComponentType>::ABI;
        assert_eq!(
            (header.size32 as usize, header.align32 as usize),
            (<BatchHeader as Fixed>::SIZE, <BatchHeader as Fixed>::ALIGN)
        );
        let mut at = 0u32;
        let span = <Span as ComponentType>::ABI;
        assert_eq!([span.next_field32(&mut at), span.next_field32(&mut at)], [0, 8], "a header's key and value");
    }

    #[test]
    fn a_0_4_record_reads_back_from_its_words_and_unknown_flags_are_refused() {
        let words: [u32; 11] = [HAS_KEY | HAS_TIMESTAMP, 3, 99, 10, 11, 20, 21, 30, 31, 5, 2];
        let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        bytes.extend_from_slice(&(-7i64).to_le_bytes());
        assert_eq!(bytes.len(), <BatchRecord as Bytes04>::SIZE);
        let read = <BatchRecord as Bytes04>::read(&bytes, 0).unwrap();
        assert_eq!(read.partition, 3);
        assert_eq!(read.topic, None, "no topic flag: word 2 is not read");
        assert_eq!((read.offset.start, read.offset.len), (10, 11));
        assert_eq!(read.key.map(|k| (k.start, k.len)), Some((20, 21)));
        assert!(read.value.is_none(), "no value flag");
        assert_eq!((read.headers.start, read.headers.len), (5, 2));
        assert_eq!(read.timestamp, Some(-7));
        bytes[..4].copy_from_slice(&(HAS_TOPIC | HAS_VALUE).to_le_bytes());
        let read = <BatchRecord as Bytes04>::read(&bytes, 0).unwrap();
        assert_eq!((read.topic, read.value.map(|v| (v.start, v.len))), (Some(99), Some((30, 31))));
        assert!(read.key.is_none() && read.timestamp.is_none());
        bytes[..4].copy_from_slice(&0x11u32.to_le_bytes());
        let refused = <BatchRecord as Bytes04>::read(&bytes, 7).unwrap_err().to_string();
        assert!(refused.contains("record 7") && refused.contains("0x11"), "{refused}");
    }

    #[test]
    fn a_record_reads_back_from_its_bytes_and_a_bad_discriminant_is_refused() {
        let mut bytes = [0u8; 72];
        let mut put = |at: usize, value: u32| bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
        put(RECORD.partition, 3);
        put(RECORD.offset, 10);
        put(RECORD.offset + 4, 11);
        put(RECORD.key_value, 20);
        put(RECORD.key_value + 4, 21);
        put(RECORD.headers, 5);
        put(RECORD.headers + 4, 2);
        bytes[RECORD.key] = 1;
        bytes[RECORD.timestamp] = 1;
        bytes[RECORD.timestamp_value..][..8].copy_from_slice(&(-7i64).to_le_bytes());
        let read = <BatchRecord as Fixed>::read(&bytes).unwrap();
        assert_eq!(read.partition, 3);
        assert_eq!((read.offset.start, read.offset.len), (10, 11));
        assert_eq!(read.topic, None);
        assert_eq!(read.key.map(|k| (k.start, k.len)), Some((20, 21)));
        assert!(read.value.is_none());
        assert_eq!((read.headers.start, read.headers.len), (5, 2));
        assert_eq!(read.timestamp, Some(-7));
        // In a list, a bad discriminant anywhere refuses the whole list.
        let mut list = [bytes, bytes, bytes].concat();
        assert_eq!(<BatchRecord as Fixed>::read_all(&list).unwrap().len(), 3);
        list[2 * RECORD.size + RECORD.topic] = 7;
        assert!(<BatchRecord as Fixed>::read_all(&list).is_err());
        bytes[RECORD.value] = 2;
        assert!(<BatchRecord as Fixed>::read(&bytes).is_err());
    }

    #[test]
    fn a_0_4_list_with_unknown_flags_in_any_record_is_refused_naming_it() {
        let mut record = [0u8; RECORD_04];
        record[..4].copy_from_slice(&(HAS_TOPIC | HAS_VALUE).to_le_bytes());
        let mut list = [record, record, record].concat();
        let read = <BatchRecord as Bytes04>::read_all(&list).unwrap();
        assert_eq!(read.len(), 3);
        assert!(read.iter().all(|r| r.topic == Some(0) && r.value.is_some() && r.key.is_none()));
        list[RECORD_04..RECORD_04 + 4].copy_from_slice(&0x20u32.to_le_bytes());
        let refused = <BatchRecord as Bytes04>::read_all(&list).unwrap_err().to_string();
        assert!(refused.contains("record 1") && refused.contains("0x20"), "{refused}");
    }
}
