//! The methods one root calls on another (`peer.*`) as typed values: [`PeerRequest`] is every
//! request with its params, [`PeerAnswer`] every answer. A request is read from the params
//! object of the one frame decoder (`rpc::parse`), by each method's own reader, so every
//! malformed field keeps the code and text it always had; an answer writes its own JSON text,
//! keys in sorted order (the order a `Value` object has always written them).

use super::message::{Field, PeerSend, PeerStatus, Receipt, ReceiptPush, WithFields};
use crate::error::Result;
use serde::Serialize;
use serde_json::{Map, Value};

/// One `peer.*` request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerRequest {
    /// `peer.send`: one message into the recipient's custody.
    Send(PeerSend<'static>),
    /// `peer.status`: the recipient's receipt for one message.
    Status(PeerStatus),
    /// `peer.subscribe`: `peer.status`, then the message's later receipts as notifications.
    Subscribe(PeerStatus),
    /// `peer.receipt`: a recipient's receipt for the original sender.
    Receipt(ReceiptPush),
    /// `peer.directory`: the root's live runs.
    Directory,
}

impl PeerRequest {
    /// Reads the params of `method` (its version already checked). An unknown method is
    /// `METHOD_NOT_FOUND`.
    pub fn decode(method: &str, params: Map<String, Value>) -> Result<PeerRequest> {
        Ok(match method {
            "peer.send" => PeerRequest::Send(PeerSend::decode(params)?),
            "peer.status" => PeerRequest::Status(PeerStatus::decode(&params)?),
            "peer.subscribe" => PeerRequest::Subscribe(PeerStatus::decode(&params)?),
            "peer.receipt" => PeerRequest::Receipt(ReceiptPush::decode(params)?),
            "peer.directory" => PeerRequest::Directory,
            other => return Err(super::rpc::unknown_method("method", other)),
        })
    }
}

/// The one notification peers send, `peer.receipt` (a `peer.subscribe` update), read; any
/// other method or malformed params is `None`: a notification gets no answer to refuse it in.
pub fn receipt_notification(method: &str, params: Map<String, Value>) -> Option<ReceiptPush> {
    if method != "peer.receipt" {
        return None;
    }
    ReceiptPush::decode(params).ok()
}

/// One `peer.*` answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerAnswer {
    /// The custody receipt of `peer.send`, `peer.status` and `peer.subscribe`, with the
    /// `flushedDevice` statement a `peer.send` answer may make (see
    /// [`super::message::FLUSHED_DEVICE`]).
    Receipt {
        receipt: Receipt,
        flushed_device: Option<u64>,
    },
    /// `peer.receipt`: the sender's latest state of the message.
    Recorded(ReceiptRecorded),
    /// `peer.directory`.
    Directory(RunsPage),
}

impl PeerAnswer {
    /// The answer's compact JSON text, keys in sorted order.
    pub fn to_json(&self) -> Vec<u8> {
        match self {
            PeerAnswer::Receipt {
                receipt,
                flushed_device,
            } => receipt.to_json_stating(*flushed_device),
            PeerAnswer::Recorded(r) => serde_json::to_vec(r).unwrap_or_default(),
            PeerAnswer::Directory(d) => serde_json::to_vec(d).unwrap_or_default(),
        }
    }
}

/// The answer to `peer.receipt`. Fields in sorted key order: they are written as declared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ReceiptRecorded {
    pub ok: bool,
    pub state: Option<&'static str>,
}

/// One of the root's live runs in `peer.directory`. Fields in sorted key order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEntry {
    pub alias: String,
    pub peer_id: String,
    pub run_id: String,
}

/// `peer.directory`: the root's live runs (one page; `cursor` is always null). Fields in
/// sorted key order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RunsPage {
    pub cursor: Option<String>,
    pub runs: Vec<RunEntry>,
}

/// An answer as the wire writes it: the text of [`PeerAnswer::to_json`].
impl Serialize for PeerAnswer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            PeerAnswer::Receipt {
                receipt,
                flushed_device,
            } => {
                let stated =
                    flushed_device.map(|d| (super::message::FLUSHED_DEVICE, Field::Num(d)));
                WithFields(receipt, stated.as_slice()).serialize(s)
            }
            PeerAnswer::Recorded(r) => r.serialize(s),
            PeerAnswer::Directory(d) => d.serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Code;
    use crate::protocol::message::ReceiptState;

    /// Each answer's text is the bytes of its `Value` (sorted keys), as it always was.
    #[test]
    fn answers_write_the_bytes_of_their_value() {
        let receipt = Receipt {
            message_id: "m-1".into(),
            from_peer_id: "p-a".into(),
            to_peer_id: "p-b".into(),
            state: ReceiptState::Accepted,
            sequence: 1,
            correlation_id: "m-1".into(),
            at_ms: 5,
            reply_message_id: None,
            code: None,
        };
        let answers = [
            PeerAnswer::Receipt {
                receipt: receipt.clone(),
                flushed_device: Some(2049),
            },
            PeerAnswer::Receipt {
                receipt,
                flushed_device: None,
            },
            PeerAnswer::Recorded(ReceiptRecorded {
                ok: true,
                state: Some("consumed"),
            }),
            PeerAnswer::Directory(RunsPage {
                cursor: None,
                runs: vec![RunEntry {
                    alias: "a".into(),
                    peer_id: "p-c".into(),
                    run_id: "r-1".into(),
                }],
            }),
        ];
        for a in answers {
            let via_value = serde_json::to_vec(&serde_json::to_value(&a).unwrap()).unwrap();
            assert_eq!(a.to_json(), via_value, "{a:?}");
            assert_eq!(serde_json::to_vec(&a).unwrap(), via_value, "{a:?}");
        }
    }

    #[test]
    fn unknown_methods_are_not_found() {
        let e = PeerRequest::decode("peer.nonexistent", Map::new()).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (Code::MethodNotFound, "unknown method peer.nonexistent")
        );
        assert_eq!(
            PeerRequest::decode("peer.directory", Map::new()).unwrap(),
            PeerRequest::Directory
        );
    }
}
