//! The benchmark's trusted adapter to a running root (its control file, then `local.tool`
//! calls over the local channel), and the inbox audit that counts lost and duplicate messages.

use crate::config::Limits;
use crate::config::internal::{BENCH_POLL_MARGIN_MS, BENCH_SEND_TIMEOUT_MS};
use crate::error::{Code, Error, Result};
use crate::protocol::local::{LocalCall, LocalRequest};
use crate::transport::LocalClient;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;

/// A root's journal device operations since it started (`local.info`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalCounts {
    pub syncs: u64,
    /// Intent frames written out (`sync_file_range`) instead of fdatasynced.
    pub write_outs: u64,
}

impl JournalCounts {
    /// What happened between `earlier` and `self` (counters only grow; a restart reads 0).
    pub fn since(self, earlier: JournalCounts) -> JournalCounts {
        JournalCounts {
            syncs: self.syncs.saturating_sub(earlier.syncs),
            write_outs: self.write_outs.saturating_sub(earlier.write_outs),
        }
    }
}

impl std::ops::Add for JournalCounts {
    type Output = JournalCounts;
    fn add(self, o: JournalCounts) -> JournalCounts {
        JournalCounts {
            syncs: self.syncs + o.syncs,
            write_outs: self.write_outs + o.write_outs,
        }
    }
}

fn store_field(info: &Value, key: &str) -> Result<u64> {
    info["store"][key].as_u64().ok_or_else(|| {
        Error::new(
            Code::InvalidRequest,
            format!("local.info has no store.{key}"),
        )
    })
}

/// One local channel to a root.
pub struct Adapter {
    client: LocalClient,
}

impl Adapter {
    /// Reads the root's control file and opens its local channel.
    pub fn connect(control: &Path, limits: &Limits) -> Result<Adapter> {
        let cf = crate::runtime::control::read(control)?;
        let client = LocalClient::connect(&cf.endpoint, cf.secret_bytes()?, limits)?;
        Ok(Adapter { client })
    }

    fn tool(&mut self, tool: &str, params: Value, timeout_ms: u64) -> Result<Value> {
        let mut p = params;
        p["tool"] = json!(tool);
        let Value::Object(p) = p else {
            return Err(Error::new(
                Code::Usage,
                "bench: tool params must be an object",
            ));
        };
        let call = LocalCall::decode("local.tool", p)?;
        self.client.call(&LocalRequest::root(call), timeout_ms)
    }

    /// Sends `content` to `to` as message `id` (so a failed send can still be looked for in
    /// the receiver's inbox) and returns once its receipt says `accepted`.
    pub fn send(&mut self, to: &str, content: &str, id: &str) -> Result<()> {
        let r = self.tool(
            "send_peer_message",
            json!({"args": {"to": to, "content": content}, "messageId": id}),
            BENCH_SEND_TIMEOUT_MS,
        )?;
        match accepted_id(&r)? {
            got if got == id => Ok(()),
            got => Err(Error::new(
                Code::InvalidRequest,
                format!("bench: sent message {id} but the receipt names {got}"),
            )),
        }
    }

    /// The root's journal fdatasyncs since it started (`local.info`).
    pub fn syncs(&mut self) -> Result<u64> {
        self.store_count("syncs")
    }

    /// The root's journal compactions (whole snapshot rewrites) since it started.
    pub fn compactions(&mut self) -> Result<u64> {
        self.store_count("compactions")
    }

    /// The root's journal fdatasyncs and intent write-outs since it started, read together.
    pub fn journal_io(&mut self) -> Result<JournalCounts> {
        let r = self.info()?;
        Ok(JournalCounts {
            syncs: store_field(&r, "syncs")?,
            write_outs: store_field(&r, "writeOuts")?,
        })
    }

    /// One counter of `local.info`'s `store` object.
    fn store_count(&mut self, key: &str) -> Result<u64> {
        store_field(&self.info()?, key)
    }

    fn info(&mut self) -> Result<Value> {
        self.client
            .call(&LocalRequest::root(LocalCall::Info), BENCH_SEND_TIMEOUT_MS)
    }

    /// One `peer_messages` page after `after`, waiting up to `wait_ms` for something new.
    pub fn page(&mut self, after: u64, wait_ms: u64) -> Result<Page> {
        let r = self.tool(
            "peer_messages",
            json!({"args": {"after": after, "waitMs": wait_ms}}),
            wait_ms + BENCH_POLL_MARGIN_MS,
        )?;
        Page::parse(&r, after)
    }
}

/// The message id of a receipt whose state is `accepted`.
pub fn accepted_id(receipt: &Value) -> Result<String> {
    let state = receipt.get("state").and_then(Value::as_str);
    let id = receipt.get("messageId").and_then(Value::as_str);
    match (state, id) {
        (Some("accepted"), Some(id)) => Ok(id.to_string()),
        _ => Err(Error::new(
            Code::InvalidRequest,
            format!(
                "bench: the send returned no accepted receipt: {}",
                crate::sanitize::line(&receipt.to_string(), 200)
            ),
        )),
    }
}

/// The message ids of one inbox page and the cursor after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Page {
    pub ids: Vec<String>,
    pub cursor: u64,
}

impl Page {
    /// Parses `{messages:[{messageId,…}], cursor}`; a missing cursor keeps `after`.
    pub fn parse(v: &Value, after: u64) -> Result<Page> {
        let msgs = v.get("messages").and_then(Value::as_array).ok_or_else(|| {
            Error::new(
                Code::InvalidRequest,
                "bench: peer_messages gave no messages array",
            )
        })?;
        let ids = msgs
            .iter()
            .map(|m| {
                m.get("messageId")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| {
                        Error::new(
                            Code::InvalidRequest,
                            "bench: an inbox message has no messageId",
                        )
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        let cursor = v.get("cursor").and_then(Value::as_u64).unwrap_or(after);
        Ok(Page { ids, cursor })
    }
}

/// Reads the whole inbox from the start: how often each message id occurs, and the cursor at
/// the end. At most `pages_max` pages.
pub fn read_all(a: &mut Adapter, pages_max: usize) -> Result<(HashMap<String, u32>, u64)> {
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut cursor = 0;
    for _ in 0..pages_max {
        let page = a.page(cursor, 0)?;
        if page.ids.is_empty() || page.cursor <= cursor {
            return Ok((counts, cursor.max(page.cursor)));
        }
        for id in page.ids {
            *counts.entry(id).or_insert(0) += 1;
        }
        cursor = page.cursor;
    }
    Err(Error::new(
        Code::Io,
        format!("bench: the inbox did not end within {pages_max} pages"),
    ))
}

/// Lost and duplicate counts of `accepted` against an inbox census.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    pub accepted: usize,
    pub lost: usize,
    pub duplicates: usize,
    /// Inbox entries whose id was neither accepted nor attempted.
    pub unexpected: usize,
    /// Sends that failed (timed out) whose message is in the inbox after all.
    pub failed_delivered: usize,
}

/// Checks every accepted id occurs exactly once in `inbox`; `failed` are ids whose send
/// failed (their presence is counted, not an error).
pub fn audit(accepted: &[String], failed: &[String], inbox: &HashMap<String, u32>) -> Audit {
    let mut a = Audit {
        accepted: accepted.len(),
        ..Audit::default()
    };
    let mut seen: HashMap<&str, u32> = HashMap::new();
    for id in accepted {
        *seen.entry(id.as_str()).or_insert(0) += 1;
    }
    for (id, n) in &seen {
        // An id accepted twice is a duplicate receipt even if the inbox holds it once.
        a.duplicates += (*n as usize).saturating_sub(1);
        match inbox.get(*id).copied().unwrap_or(0) {
            0 => a.lost += 1,
            k => a.duplicates += k as usize - 1,
        }
    }
    let failed: std::collections::HashSet<&str> = failed.iter().map(String::as_str).collect();
    a.failed_delivered = failed.iter().filter(|id| inbox.contains_key(**id)).count();
    a.unexpected = inbox
        .keys()
        .filter(|k| !seen.contains_key(k.as_str()) && !failed.contains(k.as_str()))
        .count();
    // A message we never saw accepted can still be duplicated in the inbox.
    a.duplicates += inbox
        .iter()
        .filter(|(k, _)| !seen.contains_key(k.as_str()))
        .map(|(_, n)| (*n as usize).saturating_sub(1))
        .sum::<usize>();
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipts_and_pages() {
        assert_eq!(
            accepted_id(&json!({"messageId": "m1", "state": "accepted", "sequence": 3})).unwrap(),
            "m1"
        );
        assert!(accepted_id(&json!({"messageId": "m1", "state": "refused"})).is_err());
        assert!(accepted_id(&json!({"state": "accepted"})).is_err());
        let p = Page::parse(
            &json!({"messages": [{"messageId": "a"}, {"messageId": "b"}], "cursor": 9}),
            2,
        )
        .unwrap();
        assert_eq!(
            p,
            Page {
                ids: vec!["a".into(), "b".into()],
                cursor: 9
            }
        );
        assert_eq!(Page::parse(&json!({"messages": []}), 4).unwrap().cursor, 4);
        assert!(Page::parse(&json!({"messages": [{}]}), 0).is_err());
        assert!(Page::parse(&json!({}), 0).is_err());
    }

    #[test]
    fn audit_counts_lost_duplicates_and_strangers() {
        let accepted: Vec<String> = ["a", "b", "c", "c"].iter().map(|s| s.to_string()).collect();
        let inbox: HashMap<String, u32> = [("a", 1), ("b", 3), ("x", 2)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        let a = audit(&accepted, &[], &inbox);
        assert_eq!(a.accepted, 4);
        assert_eq!(a.lost, 1); // c
        assert_eq!(a.duplicates, 1 + 2 + 1); // c accepted twice, b twice extra, x once extra
        assert_eq!(a.unexpected, 1);
        let f = audit(&accepted, &["x".to_string(), "y".to_string()], &inbox);
        assert_eq!((f.unexpected, f.failed_delivered), (0, 1));
        let clean = audit(
            &accepted[..2],
            &[],
            &[("a".to_string(), 1), ("b".to_string(), 1)]
                .into_iter()
                .collect(),
        );
        assert_eq!(
            clean,
            Audit {
                accepted: 2,
                ..Audit::default()
            }
        );
    }
}
