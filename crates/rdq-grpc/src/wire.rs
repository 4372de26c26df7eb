//! The `Workers/Work` stream's messages towards the worker, and the codec
//! that writes them.
//!
//! A leased task is written as its `rdq.v1.WorkResponse` straight from the
//! model ([`Envelope`]), without building the generated message first: on a
//! busy stream that message's strings, its payload and its timestamps,
//! allocated once to be encoded and dropped, were about a tenth of the
//! stream's CPU (docs/benchmarks.md, "What was tried"). The bytes are
//! the ones the generated message would encode to (`tests/work_wire.rs`
//! holds the two to each other on every fixture); an envelope the direct
//! mapping does not take (unknown members, [`crate::codec`]) goes the long
//! way, through the generated message.

use base64::Engine as _;
use prost::Message as _;
use prost::bytes::BufMut;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use rdq_app::work::Leased;
use rdq_envelope::{AttemptRecord, Envelope};
use serde_json::Value;
use tonic::Status;
use tonic::codec::{Codec, EncodeBuf, Encoder};

use crate::codec::has_unknown_members;
use crate::messages::leased;
use crate::pb;

/// One message of a `Work` stream towards the worker.
pub enum WorkOut {
    /// A leased task, written from the model (`WorkResponse.task`).
    Task(Leased),
    /// A claim's leased tasks together, written from the model
    /// (`WorkResponse.tasks`, for a worker whose hello asked for batches).
    Tasks(Vec<Leased>),
    /// Any other message (acks), as the generated message.
    Message(pb::WorkResponse),
}

impl WorkOut {
    /// The generated message this stands for.
    pub fn into_message(self) -> pb::WorkResponse {
        match self {
            Self::Task(task) => pb::WorkResponse {
                kind: Some(pb::work_response::Kind::Task(leased(task))),
            },
            Self::Tasks(tasks) => pb::WorkResponse {
                kind: Some(pb::work_response::Kind::Tasks(pb::ClaimResponse {
                    tasks: tasks.into_iter().map(leased).collect(),
                })),
            },
            Self::Message(m) => m,
        }
    }
}

/// The `Work` method's codec: [`WorkOut`] out, `WorkRequest` in.
#[derive(Default)]
pub struct WorkCodec;

impl Codec for WorkCodec {
    type Encode = WorkOut;
    type Decode = pb::WorkRequest;
    type Encoder = WorkEncoder;
    type Decoder = tonic_prost::ProstDecoder<pb::WorkRequest>;

    fn encoder(&mut self) -> WorkEncoder {
        WorkEncoder::default()
    }

    fn decoder(&mut self) -> Self::Decoder {
        tonic_prost::ProstDecoder::default()
    }
}

/// Writes [`WorkOut`]s; keeps its scratch buffers from one message to the
/// next.
#[derive(Default)]
pub struct WorkEncoder {
    scratch: Scratch,
}

impl Encoder for WorkEncoder {
    type Item = WorkOut;
    type Error = Status;

    fn encode(&mut self, item: WorkOut, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        match item {
            WorkOut::Task(task) => encode_task(task, &mut self.scratch, buf),
            WorkOut::Tasks(tasks) => encode_tasks(tasks, &mut self.scratch, buf),
            WorkOut::Message(m) => encode_message(&m, buf),
        }
    }
}

/// Buffers one task's encoding reuses.
#[derive(Default)]
struct Scratch {
    /// The `Envelope` message's body.
    envelope: Vec<u8>,
    /// One attempt record's or error's body.
    nested: Vec<u8>,
    /// The payload's bytes.
    payload: Vec<u8>,
    /// A batch's `ClaimResponse` body.
    batch: Vec<u8>,
}

/// Writes `task` as a `WorkResponse`.
fn encode_task(task: Leased, scratch: &mut Scratch, buf: &mut impl BufMut) -> Result<(), Status> {
    // WorkResponse { task = 1 }
    put_leased(task, scratch, buf)
}

/// Writes `tasks` as one `WorkResponse`.
fn encode_tasks(
    tasks: Vec<Leased>,
    scratch: &mut Scratch,
    buf: &mut impl BufMut,
) -> Result<(), Status> {
    let mut batch = std::mem::take(&mut scratch.batch);
    batch.clear();
    let written = tasks.into_iter().try_for_each(|task| {
        // ClaimResponse { repeated tasks = 1 }
        put_leased(task, scratch, &mut batch)
    });
    if written.is_ok() {
        // WorkResponse { tasks = 4 }
        put_bytes(buf, 4, &batch);
    }
    scratch.batch = batch;
    written
}

/// Writes `task` as a `LeasedTask` in field 1 (of a `WorkResponse` or a
/// `ClaimResponse`): from the model when the direct mapping takes it,
/// otherwise by way of the generated message.
fn put_leased(task: Leased, scratch: &mut Scratch, buf: &mut impl BufMut) -> Result<(), Status> {
    let id = task.envelope.id.text();
    if !envelope_body(&task.envelope, &id, scratch) {
        encode_key(1, WireType::LengthDelimited, buf);
        return leased(task)
            .encode_length_delimited(buf)
            .map_err(|e| Status::internal(format!("encoding a Work message: {e}")));
    }
    let body = &scratch.envelope;
    // LeasedTask { id = 1, lease_token = 2, envelope = 3 }
    let leased_len = str_len(1, id.len())
        + str_len(2, task.lease_token.len())
        + key_len(3)
        + encoded_len_varint(body.len() as u64)
        + body.len();
    encode_key(1, WireType::LengthDelimited, buf);
    encode_varint(leased_len as u64, buf);
    put_str(buf, 1, &id);
    put_str(buf, 2, task.lease_token.as_bytes());
    put_bytes(buf, 3, body);
    Ok(())
}

/// Writes a generated message.
fn encode_message(m: &pb::WorkResponse, buf: &mut impl BufMut) -> Result<(), Status> {
    m.encode(buf)
        .map_err(|e| Status::internal(format!("encoding a Work message: {e}")))
}

/// Writes the `Envelope` message's body of `env` (whose id's text is `id`)
/// into `scratch.envelope`, as `codec::into_proto` maps it; false when the
/// direct mapping does not take it (nothing usable is left in the scratch
/// then).
fn envelope_body(env: &Envelope, id: &[u8; 26], scratch: &mut Scratch) -> bool {
    let Scratch {
        envelope: out,
        nested,
        payload,
        ..
    } = scratch;
    out.clear();
    if has_unknown_members(env) {
        return false;
    }
    let Some(status) = pb::Status::from_str_name(env.status.as_str()) else {
        return false;
    };
    payload.clear();
    if base64::engine::general_purpose::STANDARD
        .decode_vec(env.payload.as_bytes(), payload)
        .is_err()
    {
        return false;
    }
    put_u32(out, 1, env.envelope_version);
    put_str(out, 2, id);
    put_str(out, 3, env.queue.as_bytes());
    put_str(out, 4, env.handler_ref.as_bytes());
    if let Some(v) = &env.handler_version {
        put_bytes(out, 5, v.as_bytes());
    }
    put_str(out, 6, payload);
    put_str(out, 7, env.payload_content_type.as_bytes());
    if let Some(v) = &env.payload_ref {
        put_bytes(out, 8, v.as_bytes());
    }
    for (k, v) in &env.headers {
        // A map entry { key = 1, value = 2 }, defaults left out.
        let len = str_len(1, k.len()) + str_len(2, v.len());
        encode_key(9, WireType::LengthDelimited, out);
        encode_varint(len as u64, out);
        put_str(out, 1, k.as_bytes());
        put_str(out, 2, v.as_bytes());
    }
    put_u32(out, 10, status as i32 as u32);
    put_u32(out, 11, u32::from(env.priority));
    put_u32(out, 12, env.deferral_count);
    put_u32(out, 13, env.attempt_count);
    put_u32(out, 14, env.redrive_count);
    put_u32(out, 15, env.claim_count);
    if let Some(t) = env.next_attempt_at {
        put_bytes(out, 16, &t.text());
    }
    if let Some(t) = env.lease_expires_at {
        put_bytes(out, 17, &t.text());
    }
    put_str(out, 18, &env.created_at.text());
    for a in &env.attempts {
        nested.clear();
        attempt_body(a, nested);
        put_bytes(out, 19, nested);
    }
    for name in env.left_out() {
        put_bytes(out, 20, name.as_bytes());
    }
    if let Some(r) = &env.dead_reason {
        nested.clear();
        put_str(nested, 1, r.code.as_bytes());
        put_str(nested, 2, &r.at.text());
        put_str(nested, 3, r.by.as_bytes());
        if let Some(m) = &r.message {
            put_bytes(nested, 4, m.as_bytes());
        }
        for name in r.left_out() {
            put_bytes(nested, 5, name.as_bytes());
        }
        put_bytes(out, 22, nested);
    }
    if let Some(r) = &env.cancel_requested {
        nested.clear();
        put_str(nested, 1, &r.at.text());
        put_str(nested, 2, r.by.as_bytes());
        if let Some(m) = &r.message {
            put_bytes(nested, 3, m.as_bytes());
        }
        for name in r.left_out() {
            put_bytes(nested, 4, name.as_bytes());
        }
        put_bytes(out, 23, nested);
    }
    true
}

/// An `AttemptRecord` message's body (its error nested in it).
fn attempt_body(a: &AttemptRecord, out: &mut Vec<u8>) {
    put_u32(out, 1, a.attempt_no);
    put_str(out, 2, &a.started_at.text());
    if let Some(t) = a.finished_at {
        put_bytes(out, 3, &t.text());
    }
    let outcome = a
        .outcome
        .and_then(|o| pb::Outcome::from_str_name(o.as_str()))
        .map_or(0, |o| o as i32 as u32);
    put_u32(out, 4, outcome);
    if let Some(e) = &a.error {
        let detail = e
            .detail
            .as_ref()
            .filter(|v| !v.is_null())
            .map(Value::to_string);
        let omitted = e.left_out();
        let len = str_len(1, e.error_type.len())
            + str_len(2, e.message.len())
            + detail.as_ref().map_or(0, |d| bytes_len(3, d.len()))
            + e.stack.as_ref().map_or(0, |s| bytes_len(4, s.len()))
            + omitted.iter().map(|n| bytes_len(5, n.len())).sum::<usize>();
        encode_key(5, WireType::LengthDelimited, out);
        encode_varint(len as u64, out);
        put_str(out, 1, e.error_type.as_bytes());
        put_str(out, 2, e.message.as_bytes());
        if let Some(d) = &detail {
            put_bytes(out, 3, d.as_bytes());
        }
        if let Some(s) = &e.stack {
            put_bytes(out, 4, s.as_bytes());
        }
        for name in omitted {
            put_bytes(out, 5, name.as_bytes());
        }
    }
    for name in a.left_out() {
        put_bytes(out, 6, name.as_bytes());
    }
}

/// A proto3 `uint32`/enum field; zero is left out.
fn put_u32(buf: &mut impl BufMut, tag: u32, v: u32) {
    if v != 0 {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(u64::from(v), buf);
    }
}

/// A proto3 `string`/`bytes` field; empty is left out.
fn put_str(buf: &mut impl BufMut, tag: u32, v: &[u8]) {
    if !v.is_empty() {
        put_bytes(buf, tag, v);
    }
}

/// A length-delimited field written whatever it holds (an `optional`
/// field that is set, an element of a repeated field, a message).
fn put_bytes(buf: &mut impl BufMut, tag: u32, v: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(v.len() as u64, buf);
    buf.put_slice(v);
}

/// The length [`put_str`] writes.
fn str_len(tag: u32, len: usize) -> usize {
    if len == 0 { 0 } else { bytes_len(tag, len) }
}

/// The length [`put_bytes`] writes.
fn bytes_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

/// The bytes `task` is written as (the tests' view of [`WorkEncoder`]).
#[doc(hidden)]
pub fn task_bytes(task: Leased) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a `Vec` cannot fail.
    let _ = encode_task(task, &mut Scratch::default(), &mut out);
    out
}

/// The bytes `tasks` are written as together (the tests' view of
/// [`WorkEncoder`]); `scratch_from` is written first with the same
/// scratch, as a busy stream's encoder would have.
#[doc(hidden)]
pub fn tasks_bytes(scratch_from: Vec<Leased>, tasks: Vec<Leased>) -> Vec<u8> {
    let mut scratch = Scratch::default();
    let _ = encode_tasks(scratch_from, &mut scratch, &mut Vec::new());
    let mut out = Vec::new();
    let _ = encode_tasks(tasks, &mut scratch, &mut out);
    out
}
