//! A small blocking HTTP/1.1 client for talking to ask servers (ours or dsh-ask-peer's), over
//! plain TCP or TLS pinned to the friend's card key (`tls::Target`, chosen per friend by
//! `tls::target`): connect and read deadlines, a bounded response, the status line and
//! headers parsed with `httparse`, and the JSON body kept for error replies too, so a
//! declined ask, a forbidden caller and a timeout stay distinguishable.

use super::tls::{Target, Wire, time_left as left};
use crate::config::internal::{ASK_RESPONSE_BYTES_MAX, ASK_RESPONSE_HEADERS_MAX};
use crate::error::{Code, Error, Result};
use serde_json::Value;
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// A parsed reply: HTTP status and JSON body (`Null` when the body is empty).
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Reply {
    /// The body of a 2xx reply, or the server's `{"ok":false,"error":{code,message}}` as an
    /// `Error` with the matching code.
    pub fn into_result(self) -> Result<Value> {
        if (200..300).contains(&self.status) {
            return Ok(self.body);
        }
        Err(error_of(self.status, &self.body))
    }

    /// The JSON text of a 2xx reply's body (a friend's advert, checked by its reader).
    pub fn into_text(self) -> Result<String> {
        self.into_result().map(|v| v.to_string())
    }

    /// The `error.message` of an error reply.
    pub fn error_message(&self) -> Option<&str> {
        self.body.pointer("/error/message").and_then(Value::as_str)
    }

    /// The body of a 2xx reply decoded as `T`; a body that is not a `T` reads as `T`'s default,
    /// which the caller's checks then refuse with their own message. Errors as
    /// [`Reply::into_result`].
    pub fn into_typed<T: serde::de::DeserializeOwned + Default>(self) -> Result<T> {
        self.into_result()
            .map(|v| serde_json::from_value(v).unwrap_or_default())
    }
}

/// Maps an error reply to our `Error`: the wire code when it is one we know, else the status.
pub fn error_of(status: u16, body: &Value) -> Error {
    let err = body.get("error");
    let wire = err
        .and_then(|e| e.get("code"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let message = err
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("the peer gave no reason");
    let code = match (wire, status) {
        ("declined", _) => Code::AskDeclined,
        ("approval_unavailable", _) => Code::ApprovalUnavailable,
        ("ask_failed", _) => Code::AskFailed,
        ("no_recommendation", _) => Code::NoRecommendation,
        ("forbidden", _) | (_, 403) => Code::AuthFailed,
        ("rate_limited", _) | (_, 429) => Code::RateLimited,
        ("payload_too_large", _) | (_, 413) => Code::MessageTooLarge,
        ("not_found", _) | (_, 404) => Code::NotFound,
        ("bad_request", _) | (_, 400) => Code::InvalidRequest,
        _ => Code::Io,
    };
    let wire_shown = if wire.is_empty() { "error" } else { wire };
    Error::new(
        code,
        format!(
            "peer answered {status} {}: {}",
            crate::sanitize::line(wire_shown, 40),
            crate::sanitize::line(message, 400)
        ),
    )
}

/// `GET path` over plain HTTP and the JSON reply (loopback, tests).
pub fn get_json(host: &str, port: u16, path: &str, timeout: Duration) -> Result<Reply> {
    request_to(&Target::plain(host, port), "GET", path, None, timeout)
}

/// `POST path` over plain HTTP with a JSON body and the JSON reply (loopback, tests).
pub fn post_json(
    host: &str,
    port: u16,
    path: &str,
    body: &Value,
    timeout: Duration,
) -> Result<Reply> {
    post_json_to(&Target::plain(host, port), path, body, timeout)
}

/// `GET path` from a target (TLS or plain, as its policy says).
pub fn get_json_from(t: &Target, path: &str, timeout: Duration) -> Result<Reply> {
    request_to(t, "GET", path, None, timeout)
}

/// `POST path` to a target with a JSON body.
pub fn post_json_to(
    t: &Target,
    path: &str,
    body: &impl serde::Serialize,
    timeout: Duration,
) -> Result<Reply> {
    // Through a JSON value, so members go out sorted whatever the body's type.
    let bytes = serde_json::to_value(body)
        .and_then(|v| serde_json::to_vec(&v))
        .map_err(|e| Error::new(Code::InvalidRequest, format!("cannot encode request: {e}")))?;
    request_to(t, "POST", path, Some(&bytes), timeout)
}

/// One plain-HTTP request on a fresh connection; `timeout` bounds connect, write and read.
pub fn request(
    method: &str,
    host: &str,
    port: u16,
    path: &str,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Reply> {
    request_to(&Target::plain(host, port), method, path, body, timeout)
}

/// One request on a fresh connection; `timeout` bounds connect, handshake, write and read
/// together. Over TLS nothing is written before the server proved its pinned key.
pub fn request_to(
    t: &Target,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Reply> {
    request_with(t, method, path, &[], body, timeout)
}

/// [`request_to`] with extra request headers (A2A's `Authorization` and `A2A-Version`); the
/// caller makes sure names and values hold no line breaks.
pub fn request_with(
    t: &Target,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Reply> {
    let deadline = Instant::now() + timeout;
    let (host, port) = (t.host, t.port);
    let stream = connect(host, port, deadline)?;
    let where_ = format!("{host}:{port}");
    let host_header = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        where_.clone()
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: {host_header}\r\naccept: application/json\r\nconnection: close\r\n"
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if let Some(b) = body {
        head.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\n",
            b.len()
        ));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    let raw = match &t.tls {
        None => exchange(stream, &bytes, deadline, &where_)?,
        Some(pinned) => {
            let tls = super::tls::connect(stream, t, pinned, deadline)?;
            exchange(tls, &bytes, deadline, &where_)?
        }
    };
    parse_response(&raw).map_err(|m| Error::new(Code::InvalidRequest, format!("{where_}: {m}")))
}

/// Writes the request and reads the response.
fn exchange<S: Wire>(
    mut stream: S,
    bytes: &[u8],
    deadline: Instant,
    where_: &str,
) -> Result<Vec<u8>> {
    let remaining = left(deadline, where_)?;
    stream
        .socket()
        .set_write_timeout(Some(remaining))
        .and_then(|()| stream.write_all(bytes))
        .and_then(|()| stream.flush())
        .map_err(|e| io_error(where_, &e))?;
    read_response(&mut stream, deadline, where_)
}

fn io_error(where_: &str, e: &std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            Error::new(Code::Timeout, format!("{where_} did not answer in time"))
        }
        _ => Error::new(Code::Disconnected, format!("{where_}: {e}")),
    }
}

fn connect(host: &str, port: u16, deadline: Instant) -> Result<TcpStream> {
    let where_ = format!("{host}:{port}");
    let addrs: Vec<_> = (host, port)
        .to_socket_addrs()
        .map_err(|e| Error::new(Code::PeerOffline, format!("cannot resolve {where_}: {e}")))?
        .take(8)
        .collect();
    let mut last = None;
    for addr in addrs {
        let remaining = left(deadline, &where_)?;
        match TcpStream::connect_timeout(&addr, remaining) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(Error::new(
        Code::PeerOffline,
        match last {
            Some(e) => format!("cannot connect to {where_}: {e}"),
            None => format!("{where_} has no address"),
        },
    ))
}

/// How a response's body ends, from its head.
#[derive(Debug)]
enum Framing {
    /// Head plus `Content-Length`: the whole response's length.
    Length(usize),
    /// `Transfer-Encoding: chunked` (Node's `http` server, dsh-ask-peer): the head's length
    /// and the decoder that finds the final chunk.
    Chunked(usize, super::chunked::Decoder),
    /// Neither: the body ends when the server closes.
    Close,
}

fn chunk_limits() -> super::chunked::Limits {
    super::chunked::Limits::for_body(ASK_RESPONSE_BYTES_MAX)
}

/// Whether the headers declare a chunked body (and refuse what cannot be read safely: another
/// transfer coding, or a chunked body that also claims a length, a request-smuggling shape).
fn is_chunked(headers: &[httparse::Header]) -> std::result::Result<bool, String> {
    let has = |n: &str| headers.iter().any(|h| h.name.eq_ignore_ascii_case(n));
    let Some(te) = headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("transfer-encoding"))
    else {
        return Ok(false);
    };
    if !te.value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
        return Err("unsupported transfer-encoding (only chunked is read)".into());
    }
    if has("content-length") {
        return Err("both transfer-encoding and content-length".into());
    }
    Ok(true)
}

/// The framing once the head is complete (`None` before).
fn framing_of(buf: &[u8]) -> std::result::Result<Option<Framing>, String> {
    let mut headers = [httparse::EMPTY_HEADER; ASK_RESPONSE_HEADERS_MAX];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("malformed HTTP answer ({e})")),
    };
    if is_chunked(resp.headers)? {
        let d = super::chunked::Decoder::new(chunk_limits());
        return Ok(Some(Framing::Chunked(len, d)));
    }
    let cl = resp
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"));
    Ok(Some(match cl {
        None => Framing::Close,
        Some(h) => {
            let n: usize = std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or("content-length is not a number")?;
            Framing::Length(len.saturating_add(n))
        }
    }))
}

/// Where the response ends in `buf`, when it is complete.
fn complete_at(
    framing: &mut Option<Framing>,
    buf: &[u8],
) -> std::result::Result<Option<usize>, String> {
    if framing.is_none() {
        *framing = framing_of(buf)?;
    }
    Ok(match framing {
        Some(Framing::Length(total)) => (buf.len() >= *total).then_some(*total),
        Some(Framing::Chunked(head, d)) => d.advance(&buf[*head..])?.then(|| *head + d.consumed()),
        Some(Framing::Close) | None => None,
    })
}

/// Reads until the peer closes or the declared length (or the final chunk) is complete,
/// within the deadline and the byte bound.
fn read_response<S: Wire>(stream: &mut S, deadline: Instant, where_: &str) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 8192];
    let mut framing = None;
    loop {
        let end = complete_at(&mut framing, &buf)
            .map_err(|m| Error::new(Code::InvalidRequest, format!("{where_}: {m}")))?;
        if let Some(total) = end {
            buf.truncate(total);
            return Ok(buf);
        }
        let remaining = left(deadline, where_)?;
        stream
            .socket()
            .set_read_timeout(Some(remaining))
            .map_err(|e| io_error(where_, &e))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(buf),
            Ok(n) => {
                if buf.len() + n > ASK_RESPONSE_BYTES_MAX {
                    return Err(Error::new(
                        Code::MessageTooLarge,
                        format!("{where_} answered more than {ASK_RESPONSE_BYTES_MAX} bytes"),
                    ));
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(where_, &e)),
        }
    }
}

/// Parses a complete response (pure); a chunked body is decoded within the response bound.
pub fn parse_response(raw: &[u8]) -> std::result::Result<Reply, String> {
    let mut headers = [httparse::EMPTY_HEADER; ASK_RESPONSE_HEADERS_MAX];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(raw) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Err("the connection closed mid-answer".into()),
        Err(e) => return Err(format!("malformed HTTP answer ({e})")),
    };
    let status = resp.code.unwrap_or(0);
    let decoded;
    let body = if is_chunked(resp.headers)? {
        decoded = super::chunked::decode(&raw[len..], chunk_limits())?;
        &decoded[..]
    } else {
        &raw[len..]
    };
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(body).map_err(|e| format!("answer is not JSON ({e})"))?
    };
    Ok(Reply { status, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_parse_and_errors_keep_their_code() {
        let raw = b"HTTP/1.1 403 Forbidden\r\ncontent-length: 60\r\n\r\n{\"ok\":false,\"error\":{\"code\":\"declined\",\"message\":\"no\"}}    ";
        let r = parse_response(raw).unwrap();
        assert_eq!(r.status, 403);
        let e = r.into_result().unwrap_err();
        assert_eq!(e.code, Code::AskDeclined);
        assert!(e.message.contains("declined"));
        let r = parse_response(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
        assert_eq!(r.body, Value::Null);
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n\r\nnot json").is_err());
        assert!(parse_response(b"HTTP/1.1 200").is_err());
        assert_eq!(error_of(429, &Value::Null).code, Code::RateLimited);
        let mut f = None;
        let raw = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nab";
        assert_eq!(complete_at(&mut f, raw), Ok(None));
        assert_eq!(
            complete_at(&mut f, b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nabc"),
            Ok(Some(41))
        );
    }

    #[test]
    fn chunked_answers_decode_and_hostile_framing_is_refused() {
        let raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{\"ok\"\r\n6\r\n:true}\r\n0\r\n\r\n";
        let r = parse_response(raw).unwrap();
        assert_eq!(r.body, serde_json::json!({"ok": true}));
        let mut f = None;
        assert_eq!(complete_at(&mut f, &raw[..raw.len() - 1]), Ok(None));
        assert_eq!(complete_at(&mut f, raw), Ok(Some(raw.len())));
        let mut extra = raw.to_vec();
        extra.extend_from_slice(b"garbage after the end");
        assert_eq!(complete_at(&mut None, &extra), Ok(Some(raw.len())));
        let both =
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ncontent-length: 3\r\n\r\n0\r\n\r\n";
        assert!(parse_response(both).unwrap_err().contains("both"));
        let gzip = b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n";
        assert!(parse_response(gzip).unwrap_err().contains("unsupported"));
        let cut = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{\"ok\"";
        assert!(parse_response(cut).unwrap_err().contains("mid-answer"));
    }
}
