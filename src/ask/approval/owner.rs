//! What the owner's approval page (`owner_page`) reads and decides: the pending asks without
//! their decision tokens, and a decision taken by the owner, who proved the page's secret
//! instead of holding the per-ask token.

use super::super::http::ApiError;
use super::Approvals;
use serde_json::{Value, json};

impl Approvals {
    /// The asks still waiting for a decision, oldest first, as the page shows them (no token).
    pub fn owner_list(&self) -> Vec<Value> {
        let map = self.pending.lock();
        let mut list: Vec<(&String, &super::Pending)> =
            map.iter().filter(|(_, p)| p.decision.is_none()).collect();
        list.sort_by(|a, b| (a.1.created_ms, a.0).cmp(&(b.1.created_ms, b.0)));
        list.into_iter()
            .map(|(id, p)| {
                json!({
                    "askId": id, "caller": p.caller, "question": p.question,
                    "contextFiles": p.context_files,
                    "createdAt": crate::clock::iso8601(p.created_ms),
                    "expiresAt": crate::clock::iso8601(p.expires_ms),
                })
            })
            .collect()
    }

    /// Records the owner's decision on `ask_id` (the caller proved the owner's secret). The ask
    /// must still be waiting: a second decision is refused as with a used token.
    pub fn decide_as_owner(&self, ask_id: &str, decision: &str) -> Result<(), ApiError> {
        let token = self
            .pending
            .lock()
            .get(ask_id)
            .filter(|p| p.decision.is_none())
            .map(|p| p.token.clone())
            .ok_or_else(|| ApiError::not_found("no such ask is waiting (decided or expired)"))?;
        self.decide(ask_id, &token, decision)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_list_hides_tokens_and_a_decision_is_taken_once() {
        let home = crate::fsutil::TempDir::new("owner-list").unwrap();
        let a = Approvals::new(&home, "127.0.0.1:9".parse().unwrap(), 4).unwrap();
        a.register("id1", "ada", "<b>q</b>", &["a.txt".into()], 10_000)
            .unwrap();
        let list = a.owner_list();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0]["question"], "<b>q</b>");
        assert!(list[0].get("decisionToken").is_none());
        let token = a.pending.lock()["id1"].token.clone();
        assert!(!Value::from(list).to_string().contains(&token));
        assert_eq!(a.decide_as_owner("id1", "maybe").unwrap_err().status, 400);
        a.decide_as_owner("id1", "approve").unwrap();
        assert_eq!(a.decide_as_owner("id1", "decline").unwrap_err().status, 404);
        assert_eq!(
            a.decide_as_owner("nope", "approve").unwrap_err().status,
            404
        );
        assert!(a.owner_list().is_empty());
    }
}
