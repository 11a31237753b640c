//! Bounded HTTP/1.1 for the ask server: request heads tokenized by `httparse` (no hand-written
//! parser), a head-size bound, `Content-Length` checked against the body bound before a byte
//! of body is read (413), separate head and body deadlines so a slow client cannot hold a
//! connection thread, and responses with dsh-ask-peer's CORS headers. One request per
//! connection (`connection: close`). The parsing and the response bytes are pure functions;
//! `read_request` and `write_response` are the thin socket shell around them. The request,
//! response and refusal types every endpoint uses live here too.

use super::tls::Wire;
use crate::config::internal::{
    ASK_BODY_BYTES_MAX, ASK_HEAD_BYTES_MAX, ASK_HEADERS_MAX, ASK_READ_CHUNK_BYTES,
};
use serde_json::{Map, Value, json};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

/// The parts of a request head the server uses.
#[derive(Clone, Debug)]
pub struct RequestHead {
    pub method: String,
    /// Path without the query.
    pub path: String,
    /// The raw query string (after `?`), possibly empty.
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub content_length: usize,
}

/// Result of parsing the bytes received so far.
#[derive(Debug)]
pub enum Head {
    /// More bytes are needed.
    Partial,
    /// The head and its length in bytes (the body starts after it).
    Complete(RequestHead, usize),
}

/// Parses a request head with `httparse`, bounding its size and the declared body length.
pub fn parse_head(buf: &[u8]) -> Result<Head, ApiError> {
    let mut headers = [httparse::EMPTY_HEADER; ASK_HEADERS_MAX];
    let mut req = httparse::Request::new(&mut headers);
    let status = req
        .parse(buf)
        .map_err(|e| ApiError::bad_request(format!("malformed HTTP request ({e})")))?;
    let len = match status {
        httparse::Status::Partial => {
            if buf.len() >= ASK_HEAD_BYTES_MAX {
                return Err(ApiError::bad_request(format!(
                    "request head exceeds {ASK_HEAD_BYTES_MAX} bytes"
                )));
            }
            return Ok(Head::Partial);
        }
        httparse::Status::Complete(len) => len,
    };
    if len > ASK_HEAD_BYTES_MAX {
        return Err(ApiError::bad_request(format!(
            "request head exceeds {ASK_HEAD_BYTES_MAX} bytes"
        )));
    }
    let method = req.method.unwrap_or_default().to_string();
    let target = req.path.unwrap_or("/");
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target.to_string(), String::new()),
    };
    let mut content_length: Option<usize> = None;
    let mut out = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let value = String::from_utf8_lossy(h.value).into_owned();
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(ApiError::bad_request(
                "transfer-encoding is not supported; send content-length",
            ));
        }
        if h.name.eq_ignore_ascii_case("content-length") {
            // One header, one number: two (even equal ones) or a list is how a request gets
            // framed differently by us and by a proxy in front of us (request smuggling).
            if content_length.is_some() {
                return Err(ApiError::bad_request("more than one content-length header"));
            }
            let v = value.trim();
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(ApiError::bad_request("content-length is not a number"));
            }
            let n: u64 = v
                .parse()
                .map_err(|_| ApiError::bad_request("content-length is not a number"))?;
            if n > ASK_BODY_BYTES_MAX as u64 {
                return Err(ApiError::too_large(n));
            }
            content_length = Some(n as usize);
        }
        out.push((h.name.to_ascii_lowercase(), value));
    }
    Ok(Head::Complete(
        RequestHead {
            method,
            path,
            query,
            headers: out,
            content_length: content_length.unwrap_or(0),
        },
        len,
    ))
}

/// Why reading a request ended without one.
#[derive(Debug)]
pub enum ReadFailure {
    /// Answer with this error, then close.
    Reply(ApiError),
    /// The client closed, or a deadline passed: close without an answer.
    Drop,
}

/// Reads one request: the head within `head_timeout`, then the body within `body_timeout`.
pub fn read_request<S: Wire>(
    stream: &mut S,
    head_timeout: Duration,
    body_timeout: Duration,
) -> Result<(RequestHead, Vec<u8>), ReadFailure> {
    let mut buf = Vec::with_capacity(1024);
    let deadline = Instant::now() + head_timeout;
    let (head, head_len) = loop {
        if let Head::Complete(head, len) = parse_head(&buf).map_err(ReadFailure::Reply)? {
            break (head, len);
        }
        read_some(
            stream,
            &mut buf,
            deadline,
            ASK_HEAD_BYTES_MAX + ASK_READ_CHUNK_BYTES,
        )?;
    };
    let mut body = buf.split_off(head_len);
    if body.len() > head.content_length {
        body.truncate(head.content_length);
    }
    let deadline = Instant::now() + body_timeout;
    while body.len() < head.content_length {
        read_some(stream, &mut body, deadline, head.content_length)?;
    }
    body.truncate(head.content_length);
    Ok((head, body))
}

/// One bounded read before `deadline`, appending at most up to `cap` bytes in total.
fn read_some<S: Wire>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    deadline: Instant,
    cap: usize,
) -> Result<(), ReadFailure> {
    let remaining = deadline.saturating_duration_since(Instant::now());
    if remaining.is_zero() {
        return Err(ReadFailure::Drop);
    }
    stream
        .socket()
        .set_read_timeout(Some(remaining))
        .map_err(|_| ReadFailure::Drop)?;
    let room = cap.saturating_sub(buf.len()).clamp(1, ASK_READ_CHUNK_BYTES);
    let mut chunk = [0u8; ASK_READ_CHUNK_BYTES];
    match stream.read(&mut chunk[..room]) {
        Ok(0) | Err(_) => Err(ReadFailure::Drop),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
    }
}

/// The reason phrase of a status this server sends.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        202 => "Accepted",
        204 => "No Content",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        429 => "Too Many Requests",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    }
}

/// The bytes of a response: status line, JSON content type (when there is a body), dsh's
/// CORS headers, content length, `connection: close`.
pub fn response_bytes(status: u16, body: &[u8]) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    if !body.is_empty() {
        out.push_str("content-type: application/json\r\n");
    }
    out.push_str(
        "access-control-allow-origin: *\r\n\
         access-control-allow-methods: GET, POST, OPTIONS\r\n\
         access-control-allow-headers: content-type\r\n",
    );
    out.push_str(&format!(
        "content-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    ));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// Writes a response within `timeout`; a client that does not read is dropped.
pub fn write_response<S: Wire>(stream: &mut S, status: u16, body: &[u8], timeout: Duration) {
    let _ = stream.socket().set_write_timeout(Some(timeout));
    let _ = stream.write_all(&response_bytes(status, body));
    let _ = stream.flush();
}

/// After an early refusal (413 before the body, a malformed head) has been written: stop
/// writing, then read and discard what the client still sends, up to `max_bytes` and
/// `max_time`, until it closes. Closing a socket with unread bytes makes the kernel send a
/// reset, and a client still writing its body (Node's `fetch`) then reports ECONNRESET
/// instead of the status it was sent; draining lets it read the status first.
pub fn drain_after_refusal<S: Wire>(stream: &mut S, max_bytes: usize, max_time: Duration) {
    let _ = stream.flush();
    let _ = stream.socket().shutdown(std::net::Shutdown::Write);
    let deadline = Instant::now() + max_time;
    let mut chunk = [0u8; ASK_READ_CHUNK_BYTES];
    let mut seen = 0usize;
    while seen < max_bytes {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() || stream.socket().set_read_timeout(Some(remaining)).is_err() {
            return;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => seen += n,
        }
    }
}

/// An HTTP-level refusal: status, dsh error code, one-line message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: crate::sanitize::line(&message.into(), 400),
        }
    }
    pub fn bad_request(m: impl Into<String>) -> ApiError {
        ApiError::new(400, "bad_request", m)
    }
    pub fn forbidden(m: impl Into<String>) -> ApiError {
        ApiError::new(403, "forbidden", m)
    }
    pub fn not_found(m: impl Into<String>) -> ApiError {
        ApiError::new(404, "not_found", m)
    }
    pub fn too_large(n: u64) -> ApiError {
        ApiError::new(
            413,
            "payload_too_large",
            format!(
                "body of {n} bytes exceeds {} bytes",
                crate::config::internal::ASK_BODY_BYTES_MAX
            ),
        )
    }
    pub fn rate_limited(m: impl Into<String>) -> ApiError {
        ApiError::new(429, "rate_limited", m)
    }
    pub fn ask_failed(m: impl Into<String>) -> ApiError {
        ApiError::new(500, "ask_failed", m)
    }
    pub fn internal(m: impl Into<String>) -> ApiError {
        ApiError::new(500, "internal", m)
    }
    pub fn response(&self) -> Response {
        Response::json(
            self.status,
            json!({"ok": false, "error": {"code": self.code, "message": self.message}}),
        )
    }
}

/// One parsed request.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: SocketAddr,
    /// The Ed25519 key the client proved in a TLS handshake (mutual TLS); `None` over plain
    /// HTTP or when it presented no certificate. The only source of identity besides the body.
    pub tls_peer_key: Option<[u8; 32]>,
}

impl Request {
    /// The body as a JSON object (`400 request body must be JSON` otherwise).
    pub fn json_object(&self) -> std::result::Result<Map<String, Value>, ApiError> {
        match serde_json::from_slice::<Value>(&self.body) {
            Ok(Value::Object(m)) => Ok(m),
            _ => Err(ApiError::bad_request("request body must be JSON")),
        }
    }

    /// The body decoded as `T`, for requests already known to carry a JSON object (read
    /// [`Request::json_object`] first); `400 request body must be JSON` when it is not a `T`.
    pub fn json_body<T: serde::de::DeserializeOwned>(&self) -> std::result::Result<T, ApiError> {
        serde_json::from_slice(&self.body)
            .map_err(|_| ApiError::bad_request("request body must be JSON"))
    }

    /// A query parameter, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name).then(|| percent_decode(v))
        })
    }

    pub fn ip(&self) -> IpAddr {
        self.peer.ip()
    }

    /// The value of the header `name` (lower case), when present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Refuses (415) an owner's decision not sent as `Content-Type: application/json`: a page
    /// in a browser can post to any address, but without a CORS preflight only as a form or
    /// `text/plain`.
    pub fn decision_is_json(&self) -> std::result::Result<(), ApiError> {
        let json = self.header("content-type").is_some_and(|t| {
            t.split(';')
                .next()
                .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
        });
        if json {
            return Ok(());
        }
        Err(ApiError::new(
            415,
            "unsupported_media_type",
            "a decision must be sent as Content-Type: application/json",
        ))
    }
}

fn percent_decode(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = match bytes[i] {
            b'%' if i + 2 < bytes.len() => hex(bytes[i + 1])
                .zip(hex(bytes[i + 2]))
                .map(|(h, l)| h * 16 + l),
            _ => None,
        };
        match (decoded, bytes[i]) {
            (Some(b), _) => {
                out.push(b);
                i += 3;
                continue;
            }
            (None, b'+') => out.push(b' '),
            (None, b) => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A response: status and an optional JSON body.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub body: Option<Value>,
}

impl Response {
    pub fn json(status: u16, body: Value) -> Response {
        Response {
            status,
            body: Some(body),
        }
    }
    pub fn ok(body: Value) -> Response {
        Response::json(200, body)
    }
    /// A 200 with a typed body (the same bytes its JSON value gives: keys sorted).
    pub fn ok_typed(body: &impl serde::Serialize) -> Response {
        Response::typed(200, body)
    }
    /// A response with a typed body.
    pub fn typed(status: u16, body: &impl serde::Serialize) -> Response {
        Response::json(status, serde_json::to_value(body).unwrap_or(Value::Null))
    }
    pub fn no_content() -> Response {
        Response {
            status: 204,
            body: None,
        }
    }
    pub fn bytes(&self) -> Vec<u8> {
        match &self.body {
            Some(v) => serde_json::to_vec(v).unwrap_or_default(),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(buf: &[u8]) -> (RequestHead, usize) {
        match parse_head(buf).unwrap() {
            Head::Complete(h, n) => (h, n),
            Head::Partial => panic!("partial"),
        }
    }

    #[test]
    fn heads_parse_with_query_and_length() {
        let raw =
            b"POST /ask/status?askId=abc HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        let (h, n) = complete(raw);
        assert_eq!(h.method, "POST");
        assert_eq!(h.path, "/ask/status");
        assert_eq!(h.query, "askId=abc");
        assert_eq!(h.content_length, 5);
        assert_eq!(&raw[n..], b"hello");
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\nHo").unwrap(),
            Head::Partial
        ));
    }

    #[test]
    fn oversize_is_refused_before_the_body() {
        let e = parse_head(b"POST /ask HTTP/1.1\r\ncontent-length: 2097152\r\n\r\n").unwrap_err();
        assert_eq!(e.status, 413);
        let e =
            parse_head(b"POST /ask HTTP/1.1\r\ncontent-length: 99999999999999999999999\r\n\r\n")
                .unwrap_err();
        assert_eq!(e.status, 400);
        let mut long = b"GET / HTTP/1.1\r\nx: ".to_vec();
        long.resize(ASK_HEAD_BYTES_MAX + 10, b'a');
        assert_eq!(parse_head(&long).unwrap_err().status, 400);
        let e =
            parse_head(b"POST /ask HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n").unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(
            parse_head(b"\x00\x01garbage\r\n\r\n").unwrap_err().status,
            400
        );
    }

    #[test]
    fn one_content_length_only() {
        for head in [
            &b"POST /ask HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 2\r\n\r\n"[..],
            b"POST /ask HTTP/1.1\r\ncontent-length: 5\r\ncontent-length: 5\r\n\r\n",
            b"POST /ask HTTP/1.1\r\ncontent-length: 5, 5\r\n\r\n",
            b"POST /ask HTTP/1.1\r\ncontent-length: +5\r\n\r\n",
            b"POST /ask HTTP/1.1\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
        ] {
            assert_eq!(parse_head(head).unwrap_err().status, 400);
        }
    }

    #[test]
    fn responses_carry_cors_and_length() {
        let text = String::from_utf8(response_bytes(200, b"{}")).unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(text.contains("access-control-allow-origin: *\r\n"));
        assert!(text.contains("access-control-allow-methods: GET, POST, OPTIONS\r\n"));
        assert!(text.contains("content-length: 2\r\n"));
        assert!(text.ends_with("\r\n\r\n{}"));
        let empty = String::from_utf8(response_bytes(204, b"")).unwrap();
        assert!(empty.starts_with("HTTP/1.1 204 No Content\r\n"));
        assert!(!empty.contains("content-type: application/json"));
    }

    #[test]
    fn query_params_decode() {
        let req = Request {
            method: "GET".into(),
            path: "/ask/status".into(),
            query: "x=1&askId=a%2Db+c&bad=%zz".into(),
            headers: vec![],
            body: vec![],
            peer: "127.0.0.1:1".parse().unwrap(),
            tls_peer_key: None,
        };
        assert_eq!(req.query_param("askId").as_deref(), Some("a-b c"));
        assert_eq!(req.query_param("bad").as_deref(), Some("%zz"));
        assert_eq!(req.query_param("nope"), None);
    }
}
