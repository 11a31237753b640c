//! The client trusted local adapters (the root's own CLI/MCP, children of `peer host`) use to
//! call their root: `local.hello` with the per-root secret, then synchronous calls. Single
//! threaded; notifications arriving between answers are kept in a bounded queue.

use super::connection::{self, FrameReader, ReadEvent};
use crate::config::Limits;
use crate::error::{Code, Error, Result};
use crate::protocol::handshake;
use crate::protocol::local::LocalRequest;
use crate::protocol::rpc::{self, Id, Incoming};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::collections::VecDeque;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct LocalClient {
    stream: UnixStream,
    reader: FrameReader,
    next_id: i64,
    limits: Limits,
    notifications: VecDeque<(String, Map<String, Value>)>,
}

impl LocalClient {
    /// Connects to the root at `path` and presents `secret` within `handshakeMs`.
    pub fn connect(path: &Path, secret: [u8; 32], limits: &Limits) -> Result<LocalClient> {
        let deadline = Instant::now() + Duration::from_millis(limits.handshake_ms);
        let stream = connection::connect_bounded(path, deadline).map_err(|e| {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
                    Code::PeerOffline
                }
                std::io::ErrorKind::TimedOut => Code::Timeout,
                _ => Code::Io,
            };
            Error::new(
                code,
                format!("cannot reach the root at {}: {e}", path.display()),
            )
        })?;
        connection::check_same_user(&stream)?;
        let read_half = stream
            .try_clone()
            .map_err(|e| connection::io_err("cannot clone a socket", &e))?;
        let mut client = LocalClient {
            stream,
            reader: FrameReader::new(read_half, limits.frame_bytes),
            next_id: handshake::AUTH_ID,
            limits: limits.clone(),
            notifications: VecDeque::new(),
        };
        client.write(&handshake::local_hello_frame(&secret))?;
        client.wait_for(handshake::HELLO_ID, deadline)?;
        Ok(client)
    }

    /// Adopts the root's own `frameBytes` (from `local.info`): its answers and our requests
    /// are bounded by what the root allows, not by this process's defaults.
    pub fn set_frame_bytes(&mut self, frame_bytes: u64) {
        self.limits.frame_bytes = frame_bytes;
        self.reader.set_frame_bytes(frame_bytes);
    }

    /// The pid of the process that listens on the root's socket, as the kernel reports it
    /// (SO_PEERCRED): evidence of which process the root is, not a claim it made.
    pub fn root_pid(&self) -> Option<u32> {
        use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
        let cred = getsockopt(&self.stream, PeerCredentials).ok()?;
        u32::try_from(cred.pid()).ok()
    }

    /// Calls one local method and waits up to `timeout_ms` (0: `acknowledgementMs`) for its
    /// answer, read as `T` (the answer's own type, or a `Value`).
    pub fn call<T: DeserializeOwned>(&mut self, req: &LocalRequest, timeout_ms: u64) -> Result<T> {
        let (method, params) = req.encode();
        let answer = self.call_raw(method, &params, timeout_ms)?;
        serde_json::from_value(answer).map_err(|e| {
            Error::new(
                Code::InvalidRequest,
                format!("the root's answer to {method} is not the expected shape: {e}"),
            )
        })
    }

    /// Calls `method` with `params` exactly as given, unchecked: for tests and probes that
    /// write what no typed request can (unknown methods, malformed params).
    pub fn call_raw(&mut self, method: &str, params: &Value, timeout_ms: u64) -> Result<Value> {
        let ms = if timeout_ms == 0 {
            self.limits.acknowledgement_ms
        } else {
            timeout_ms
        };
        let deadline = Instant::now() + Duration::from_millis(ms);
        self.next_id += 1;
        let id = self.next_id;
        let frame = rpc::encode_request(&Id::Num(id), method, params);
        connection::check_frame_len(&frame, self.limits.frame_bytes)?;
        self.write(&frame)?;
        self.wait_for(id, deadline)
    }

    /// The next notification the root pushed (e.g. after a subscription), waiting up to
    /// `timeout_ms`; `None` when none came.
    pub fn next_notification(
        &mut self,
        timeout_ms: u64,
    ) -> Result<Option<(String, Map<String, Value>)>> {
        if let Some(n) = self.notifications.pop_front() {
            return Ok(Some(n));
        }
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        match self.read_one(deadline)? {
            None => Ok(None),
            Some(Incoming::Notification { method, params }) => Ok(Some((method, params))),
            Some(_) => Ok(None),
        }
    }

    fn write(&mut self, frame: &[u8]) -> Result<()> {
        connection::write_with_deadline(&mut self.stream, frame, self.limits.write_ms)
            .map_err(|e| Error::new(Code::Disconnected, format!("cannot write to the root: {e}")))
    }

    fn wait_for(&mut self, id: i64, deadline: Instant) -> Result<Value> {
        loop {
            match self.read_one(deadline)? {
                None => {
                    return Err(Error::new(
                        Code::Timeout,
                        "the root did not answer before the deadline",
                    ));
                }
                Some(Incoming::Response {
                    id: Some(Id::Num(got)),
                    result,
                }) if got == id => {
                    return result.map_err(|obj| Error::from_rpc(&obj));
                }
                // An error without id answers a frame the root could not read: it is ours.
                Some(Incoming::Response {
                    id: None,
                    result: Err(obj),
                }) => return Err(Error::from_rpc(&obj)),
                Some(Incoming::Notification { method, params }) => {
                    if self.notifications.len() as u64 >= self.limits.outgoing_frames {
                        self.notifications.pop_front();
                    }
                    self.notifications.push_back((method, params));
                }
                Some(_) => {} // a late answer to a call that already timed out
            }
        }
    }

    /// One parsed message, or `None` at the deadline.
    fn read_one(&mut self, deadline: Instant) -> Result<Option<Incoming>> {
        loop {
            match self.reader.next(Some(deadline)) {
                ReadEvent::Frame(bytes) => match rpc::parse(&bytes) {
                    Ok(msg) => return Ok(Some(msg)),
                    Err(_) => continue,
                },
                ReadEvent::InvalidUtf8 => continue,
                ReadEvent::TimedOut => return Ok(None),
                ReadEvent::TooLarge => {
                    return Err(Error::new(
                        Code::FrameTooLarge,
                        "the root sent a frame over frameBytes",
                    ));
                }
                ReadEvent::Closed => return Err(connection::disconnected()),
            }
        }
    }
}
