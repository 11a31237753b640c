//! What the owner's approval page (`owner_page`) reads and decides: the pending asks without
//! their decision tokens, and a decision taken by the owner, who proved the page's secret
//! instead of holding the per-ask token.

use super::super::http::ApiError;
use super::Approvals;
use serde::Serialize;

/// A waiting ask as the owner's page shows it (no decision token).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerAsk {
    pub ask_id: String,
    pub caller: String,
    pub question: String,
    pub context_files: Vec<String>,
    pub created_at: String,
    pub expires_at: String,
}

impl Approvals {
    /// The asks still waiting for a decision, oldest first, as the page shows them (no token).
    pub fn owner_list(&self) -> Vec<OwnerAsk> {
        let map = self.pending.lock();
        let mut list: Vec<(&String, &super::Pending)> =
            map.iter().filter(|(_, p)| p.decision.is_none()).collect();
        list.sort_by(|a, b| (a.1.created_ms, a.0).cmp(&(b.1.created_ms, b.0)));
        list.into_iter()
            .map(|(id, p)| OwnerAsk {
                ask_id: id.clone(),
                caller: p.caller.clone(),
                question: p.question.clone(),
                context_files: p.context_files.clone(),
                created_at: crate::clock::iso8601(p.created_ms),
                expires_at: crate::clock::iso8601(p.expires_ms),
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
        let shown = serde_json::to_value(&list[0]).unwrap();
        assert_eq!(shown["question"], "<b>q</b>");
        assert!(shown.get("decisionToken").is_none());
        let token = a.pending.lock()["id1"].token.clone();
        assert!(!serde_json::to_string(&list).unwrap().contains(&token));
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
