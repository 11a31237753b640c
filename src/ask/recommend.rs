//! Friend recommendation: the pure parts of dsh-ask-peer's `/recommend` — request validation,
//! topic scoring of friends' adverts, the plan of which friends to try directly and which to
//! forward to — and the owner's store of recommendations waiting for a decision.
//!
//! Scoring (dsh §11): every topic word (`[a-z0-9]+`, longer than two characters) adds 3 when a
//! tag contains it, 3 when a session topic does, 1 when the name or description does. The
//! request is bounded: `maxHops` 0–3, at most [`RECOMMEND_FAN_OUT`] forwards and
//! [`RECOMMEND_DIRECT_TRIES`] card fetches per node, a `path` of visited agents that are never
//! asked again, so a "who knows X?" stays a small tree.

#![forbid(unsafe_code)]

pub mod pending;

use crate::config::internal::{
    RECOMMEND_CANDIDATES_MAX, RECOMMEND_DIRECT_TRIES, RECOMMEND_FAN_OUT, RECOMMEND_HOPS_MAX,
    RECOMMEND_PATH_MAX, RECOMMEND_PATH_NAME_CHARS_MAX, RECOMMEND_TOPIC_CHARS_MAX,
    RECOMMEND_VIA_MAX,
};

use serde_json::Value;

/// A validated `/recommend` request (the authentication fields are the core's business).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub caller: String,
    pub topic: Option<String>,
    pub max_hops: u64,
    pub path: Vec<String>,
}

/// Reads the discovery fields of a `/recommend` body. `protocolVersion` and `caller` are
/// checked by the authentication that runs first; here: `topic` (optional one-line string),
/// `maxHops` (clamped to 0–3 like dsh, non-numbers refused), `path` (strings only, bounded).
pub fn parse_request(caller: &str, body: &Value) -> Result<Request, String> {
    let topic = match body.get("topic") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.trim().is_empty() => None,
        Some(Value::String(s))
            if s.chars().count() <= RECOMMEND_TOPIC_CHARS_MAX
                && !s.chars().any(char::is_control) =>
        {
            Some(s.trim().to_string())
        }
        Some(_) => {
            return Err(format!(
                "topic must be a one-line string of at most {RECOMMEND_TOPIC_CHARS_MAX} characters"
            ));
        }
    };
    let max_hops = match body.get("maxHops") {
        None | Some(Value::Null) => 0,
        Some(v) => match v.as_f64() {
            Some(f) if f.is_finite() => f.floor().clamp(0.0, RECOMMEND_HOPS_MAX as f64) as u64,
            _ => return Err("maxHops must be a number".into()),
        },
    };
    let path = match body.get("path") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) if a.len() <= RECOMMEND_PATH_MAX => {
            let mut out: Vec<String> = Vec::new();
            // dsh drops non-string entries; names are bounded so a path stays small.
            for name in a.iter().filter_map(Value::as_str) {
                if name.chars().count() > RECOMMEND_PATH_NAME_CHARS_MAX {
                    return Err("path names must be at most 64 characters".into());
                }
                if !out.iter().any(|n| n == name) {
                    out.push(name.to_string());
                }
            }
            out
        }
        Some(_) => {
            return Err(format!(
                "path must be an array of at most {RECOMMEND_PATH_MAX} names"
            ));
        }
    };
    Ok(Request {
        caller: caller.to_string(),
        topic,
        max_hops,
        path,
    })
}

/// The words of a topic that count: lowercase `[a-z0-9]+` runs longer than two characters.
pub fn topic_words(topic: &str) -> Vec<String> {
    let lower = topic.to_lowercase();
    let mut words: Vec<String> = Vec::new();
    for w in lower.split(|c: char| !c.is_ascii_alphanumeric()) {
        if w.len() > 2 && !words.iter().any(|x| x == w) {
            words.push(w.to_string());
        }
    }
    words
}

/// What a friend is known to know: its name, and its advert's text when one is known.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Known {
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    pub session_topics: Vec<String>,
}

impl Known {
    /// From a verified advert (`description`, `tags`, `sessions[].topic`/`topics`).
    pub fn from_advert(name: &str, advert: Option<&Value>) -> Known {
        let strings = |v: Option<&Value>| -> Vec<String> {
            v.and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        let mut session_topics = Vec::new();
        if let Some(sessions) = advert
            .and_then(|a| a.get("sessions"))
            .and_then(Value::as_array)
        {
            for s in sessions {
                if let Some(t) = s.get("topic").and_then(Value::as_str) {
                    session_topics.push(t.to_string());
                }
                session_topics.extend(strings(s.get("topics")));
            }
        }
        Known {
            name: name.to_string(),
            description: advert
                .and_then(|a| a.get("description"))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            tags: strings(advert.and_then(|a| a.get("tags"))),
            session_topics,
        }
    }
}

/// dsh's score of one friend for the topic words.
pub fn score(known: &Known, words: &[String]) -> u64 {
    let lower = |v: &[String]| -> Vec<String> { v.iter().map(|s| s.to_lowercase()).collect() };
    let (tags, topics) = (lower(&known.tags), lower(&known.session_topics));
    let name = known.name.to_lowercase();
    let description = known.description.to_lowercase();
    let mut total = 0;
    for w in words {
        if tags.iter().any(|t| t.contains(w.as_str())) {
            total += 3;
        }
        if topics.iter().any(|t| t.contains(w.as_str())) {
            total += 3;
        }
        if name.contains(w.as_str()) || description.contains(w.as_str()) {
            total += 1;
        }
    }
    total
}

/// Which friends to try, in order, for one request at one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Fetch these friends' cards, first verifying card wins.
    pub direct: Vec<String>,
    /// Then forward the request (one hop less) to these, first verifying answer wins.
    pub forward: Vec<String>,
    /// Then, as dsh does, any friend's card, so a referral is still produced.
    pub fallback: Vec<String>,
}

/// The friends a request may consider: configured order, minus the caller, the visited path
/// and this node itself, at most [`RECOMMEND_CANDIDATES_MAX`].
pub fn candidates(friends: &[String], req: &Request, me: &str) -> Vec<String> {
    friends
        .iter()
        .filter(|f| *f != &req.caller && *f != me && !req.path.contains(f))
        .take(RECOMMEND_CANDIDATES_MAX)
        .cloned()
        .collect()
}

/// dsh's plan over scored candidates (in configured order): with a topic, the positive
/// scorers best first; direct answers are skipped when a topic matched nobody and hops remain
/// (the request travels instead); forwards go to the first [`RECOMMEND_FAN_OUT`] of the ranked
/// list.
pub fn plan(known: &[Known], req: &Request) -> Plan {
    let words = req.topic.as_deref().map(topic_words).unwrap_or_default();
    let mut scored: Vec<(u64, usize)> = known
        .iter()
        .enumerate()
        .map(|(i, k)| (score(k, &words), i))
        .collect();
    // Stable: equal scores keep the configured order.
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let positive: Vec<String> = scored
        .iter()
        .filter(|(s, _)| *s > 0)
        .map(|(_, i)| known[*i].name.clone())
        .collect();
    let everyone: Vec<String> = known.iter().map(|k| k.name.clone()).collect();
    let ranked = if positive.is_empty() {
        everyone.clone()
    } else {
        positive.clone()
    };
    // A topic nobody here matches is never answered with a random friend: it travels while
    // hops remain, and otherwise ends in no_recommendation (peer-ask(1)'s scoring).
    let topic_missed = req.topic.is_some() && positive.is_empty();
    let direct = if topic_missed {
        Vec::new()
    } else {
        ranked
            .iter()
            .take(RECOMMEND_DIRECT_TRIES)
            .cloned()
            .collect()
    };
    let forward = if req.topic.is_some() && req.max_hops > 0 {
        ranked.iter().take(RECOMMEND_FAN_OUT).cloned().collect()
    } else {
        Vec::new()
    };
    let fallback = if topic_missed {
        Vec::new()
    } else {
        everyone.into_iter().take(RECOMMEND_DIRECT_TRIES).collect()
    };
    Plan {
        direct,
        forward,
        fallback,
    }
}

/// The `path` a forwarded request carries: the old path, the caller and this node, unique.
pub fn forward_path(req: &Request, me: &str) -> Vec<String> {
    let mut path = req.path.clone();
    for name in [req.caller.as_str(), me] {
        if !path.iter().any(|p| p == name) {
            path.push(name.to_string());
        }
    }
    path
}

/// A `via` chain as received from a friend, made safe to forward, store and show: at most
/// [`RECOMMEND_VIA_MAX`] names, each sanitized to one line of at most [`RECOMMEND_PATH_NAME_CHARS_MAX`]
/// characters, empty ones dropped. Every path that takes `via` from the wire goes through it.
pub fn clean_via(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .take(RECOMMEND_VIA_MAX)
        .map(|s| crate::sanitize::line(s, RECOMMEND_PATH_NAME_CHARS_MAX))
        .filter(|s| !s.trim().is_empty())
        .collect()
}

/// The `via` chain of an answer: this node first when the answer came through a forward (the
/// child's chain follows), or when this node was itself reached by a forward.
pub fn via(me: &str, req: &Request, child: Option<&[String]>) -> Vec<String> {
    match child {
        Some(c) => std::iter::once(me.to_string())
            .chain(c.iter().cloned())
            .collect(),
        None if !req.path.is_empty() => vec![me.to_string()],
        None => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn known(name: &str, tags: &[&str], description: &str) -> Known {
        Known {
            name: name.into(),
            description: description.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            session_topics: Vec::new(),
        }
    }

    fn req(topic: Option<&str>, hops: u64) -> Request {
        Request {
            caller: "ada".into(),
            topic: topic.map(str::to_string),
            max_hops: hops,
            path: Vec::new(),
        }
    }

    #[test]
    fn requests_are_clamped_and_bounded() {
        let r = parse_request(
            "ada",
            &json!({"maxHops": 9.7, "path": ["x", 3, "x", "y"], "topic": " pg "}),
        )
        .unwrap();
        assert_eq!(
            (r.max_hops, r.path.clone(), r.topic.as_deref()),
            (3, vec!["x".into(), "y".into()], Some("pg"))
        );
        assert_eq!(
            parse_request("ada", &json!({"maxHops": -2}))
                .unwrap()
                .max_hops,
            0
        );
        assert_eq!(parse_request("ada", &json!({})).unwrap().max_hops, 0);
        assert!(parse_request("ada", &json!({"maxHops": "2"})).is_err());
        assert!(parse_request("ada", &json!({"path": vec!["a"; 9]})).is_err());
        assert!(parse_request("ada", &json!({"topic": "a\nb"})).is_err());
        assert!(parse_request("ada", &json!({"topic": 5})).is_err());
    }

    #[test]
    fn scoring_follows_dsh() {
        let words = topic_words("Postgres migrations, on k8s!");
        assert_eq!(words, ["postgres", "migrations", "k8s"]);
        let mut k = known("bob", &["postgres-ops"], "runs MIGRATIONS");
        assert_eq!(score(&k, &words), 3 + 1);
        k.session_topics = vec!["k8s upgrade".into()];
        assert_eq!(score(&k, &words), 3 + 1 + 3);
        assert_eq!(score(&known("postgres", &[], ""), &words), 1);
        assert!(topic_words("a an to").is_empty());
    }

    #[test]
    fn plans_direct_forward_and_fallback() {
        let ks = vec![
            known("bob", &[], ""),
            known("carol", &["postgres"], ""),
            known("dan", &[], "postgres too"),
        ];
        let p = plan(&ks, &req(Some("postgres"), 1));
        assert_eq!(p.direct, ["carol", "dan"]);
        assert_eq!(p.forward, ["carol", "dan"]);
        assert_eq!(p.fallback, ["bob", "carol", "dan"]);
        // A topic nobody matches travels instead of being answered at random.
        let p = plan(&ks, &req(Some("quantum"), 2));
        assert!(p.direct.is_empty());
        assert_eq!(p.forward, ["bob", "carol"]);
        assert!(p.fallback.is_empty());
        // Out of hops: a topic nobody matches is not answered with a random friend.
        let p = plan(&ks, &req(Some("quantum"), 0));
        assert_eq!(
            (p.direct.len(), p.forward.len(), p.fallback.len()),
            (0, 0, 0)
        );
        let p = plan(&ks, &req(None, 1));
        assert_eq!((p.direct.len(), p.forward.len()), (3, 0));
    }

    #[test]
    fn paths_stop_loops_and_via_names_the_chain() {
        let mut r = req(Some("x"), 2);
        r.path = vec!["carol".into()];
        let friends: Vec<String> = ["ada", "bob", "carol", "dan", "me"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(candidates(&friends, &r, "me"), ["bob", "dan"]);
        assert_eq!(forward_path(&r, "me"), ["carol", "ada", "me"]);
        assert_eq!(via("me", &r, None), ["me"]);
        assert_eq!(via("me", &req(None, 0), None), Vec::<String>::new());
        assert_eq!(via("me", &r, Some(&["dan".to_string()])), ["me", "dan"]);
        let hostile = json!(vec!["\u{1b}]0;x\u{7}".to_string() + &"y".repeat(500); 100]);
        let clean = clean_via(Some(&hostile));
        assert_eq!(clean.len(), RECOMMEND_VIA_MAX);
        assert!(
            clean
                .iter()
                .all(|n| n.chars().count() <= RECOMMEND_PATH_NAME_CHARS_MAX
                    && !n.chars().any(char::is_control))
        );
        assert!(clean_via(Some(&json!("not a list"))).is_empty());
    }
}
