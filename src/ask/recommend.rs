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

use super::advertise::CheckedAdvert;
use super::loose::Loose;
use serde::{Deserialize, Serialize};

/// A validated `/recommend` request (the authentication fields are the core's business).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub caller: String,
    pub topic: Option<String>,
    pub max_hops: u64,
    pub path: Vec<String>,
}

/// The discovery fields of a `/recommend` body as they arrive (`protocolVersion`, `caller`
/// and the credentials are read by the authentication that runs first). `null` is absent.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecommendRequest {
    #[serde(default)]
    pub protocol_version: Option<Loose<u64>>,
    #[serde(default)]
    pub topic: Option<Loose<String>>,
    #[serde(default)]
    pub max_hops: Option<Loose<f64>>,
    #[serde(default)]
    pub path: Option<Loose<Vec<Loose<String>>>>,
}

/// Validates the discovery fields of a `/recommend` body: `topic` (optional one-line string),
/// `maxHops` (clamped to 0–3 like dsh, non-numbers refused), `path` (strings only, bounded).
pub fn parse_request(caller: &str, body: &RecommendRequest) -> Result<Request, String> {
    let topic = match body.topic.as_ref().map(Loose::as_ref) {
        None => None,
        Some(Some(s)) if s.trim().is_empty() => None,
        Some(Some(s))
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
    let max_hops = match body.max_hops.as_ref().map(Loose::as_ref) {
        None => 0,
        Some(Some(f)) if f.is_finite() => f.floor().clamp(0.0, RECOMMEND_HOPS_MAX as f64) as u64,
        Some(_) => return Err("maxHops must be a number".into()),
    };
    let path = match body.path.as_ref().map(Loose::as_ref) {
        None => Vec::new(),
        Some(Some(a)) if a.len() <= RECOMMEND_PATH_MAX => {
            let mut out: Vec<String> = Vec::new();
            // dsh drops non-string entries; names are bounded so a path stays small.
            for name in a.iter().filter_map(Loose::as_ref) {
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
    pub fn from_advert(name: &str, advert: Option<&CheckedAdvert>) -> Known {
        let Some(advert) = advert else {
            return Known {
                name: name.to_string(),
                ..Known::default()
            };
        };
        let mut session_topics = Vec::new();
        for s in &advert.sessions {
            session_topics.extend(s.topic.iter().cloned());
            session_topics.extend(s.topics.iter().cloned());
        }
        Known {
            name: name.to_string(),
            description: advert.description.clone(),
            tags: advert.tags.clone(),
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

/// The agents a recommendation travelled through, always safe to forward, store and show: at
/// most [`RECOMMEND_VIA_MAX`] names, each sanitized to one line of at most
/// [`RECOMMEND_PATH_NAME_CHARS_MAX`] characters, empty ones dropped. Every way a chain is made
/// (decoded from a friend's answer or the pending file, or extended by this node) goes through
/// [`Via::clean`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Via(Vec<String>);

impl Via {
    /// The bounded, sanitized chain of `names` (non-names dropped by the caller).
    pub fn clean<'a>(names: impl IntoIterator<Item = &'a str>) -> Via {
        Via(names
            .into_iter()
            .take(RECOMMEND_VIA_MAX)
            .map(|s| crate::sanitize::line(s, RECOMMEND_PATH_NAME_CHARS_MAX))
            .filter(|s| !s.trim().is_empty())
            .collect())
    }

    /// The names, first hop first.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Anything but an array of names decodes as an empty chain; entries that are not strings are
/// dropped, the rest cleaned.
impl<'de> Deserialize<'de> for Via {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Via, D::Error> {
        let raw = Loose::<Vec<Loose<String>>>::deserialize(d)?;
        let names = raw.as_ref().map(Vec::as_slice).unwrap_or_default();
        Ok(Via::clean(
            names.iter().filter_map(Loose::as_ref).map(String::as_str),
        ))
    }
}

/// A `/recommend` answer, `{ok, from, card, via?}`; as received, `from` and `card` are `None`
/// unless they are strings (the card is verified before anything is believed).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecommendReply {
    #[serde(default)]
    pub ok: bool,
    #[serde(default, deserialize_with = "string_or_none")]
    pub from: Option<String>,
    #[serde(default, deserialize_with = "string_or_none")]
    pub card: Option<String>,
    #[serde(default, skip_serializing_if = "Via::is_empty")]
    pub via: Via,
}

fn string_or_none<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<Loose<String>>::deserialize(d)?.and_then(|l| l.as_ref().cloned()))
}

/// The `via` chain of an answer: this node first when the answer came through a forward (the
/// child's chain follows, cut to the bound), or when this node was itself reached by a forward.
pub fn via(me: &str, req: &Request, child: Option<&Via>) -> Via {
    match child {
        Some(c) => Via::clean(std::iter::once(me).chain(c.names().iter().map(String::as_str))),
        None if !req.path.is_empty() => Via::clean([me]),
        None => Via::default(),
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

    fn body(v: serde_json::Value) -> RecommendRequest {
        serde_json::from_value(v).unwrap()
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
            &body(json!({"maxHops": 9.7, "path": ["x", 3, "x", "y"], "topic": " pg "})),
        )
        .unwrap();
        assert_eq!(
            (r.max_hops, r.path.clone(), r.topic.as_deref()),
            (3, vec!["x".into(), "y".into()], Some("pg"))
        );
        assert_eq!(
            parse_request("ada", &body(json!({"maxHops": -2})))
                .unwrap()
                .max_hops,
            0
        );
        assert_eq!(parse_request("ada", &body(json!({}))).unwrap().max_hops, 0);
        assert!(parse_request("ada", &body(json!({"maxHops": "2"}))).is_err());
        assert!(parse_request("ada", &body(json!({"path": vec!["a"; 9]}))).is_err());
        assert!(parse_request("ada", &body(json!({"topic": "a\nb"}))).is_err());
        assert!(parse_request("ada", &body(json!({"topic": 5}))).is_err());
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
        assert_eq!(via("me", &r, None).names(), ["me"]);
        assert!(via("me", &req(None, 0), None).is_empty());
        let dan = Via::clean(["dan"]);
        assert_eq!(via("me", &r, Some(&dan)).names(), ["me", "dan"]);
        let hostile = json!(vec!["\u{1b}]0;x\u{7}".to_string() + &"y".repeat(500); 100]);
        let clean: Via = serde_json::from_value(hostile).unwrap();
        assert_eq!(clean.names().len(), RECOMMEND_VIA_MAX);
        assert!(
            clean
                .names()
                .iter()
                .all(|n| n.chars().count() <= RECOMMEND_PATH_NAME_CHARS_MAX
                    && !n.chars().any(char::is_control))
        );
        let not_a_list: Via = serde_json::from_value(json!("not a list")).unwrap();
        assert!(not_a_list.is_empty());
    }

    /// The chain this node answers with is bounded too: a child's full chain plus this node
    /// is cut to the bound (it was one name longer).
    #[test]
    fn a_forwarded_answer_keeps_via_bounded() {
        let mut r = req(Some("x"), 2);
        r.path = vec!["carol".into()];
        let names: Vec<String> = (0..RECOMMEND_VIA_MAX).map(|i| format!("n{i}")).collect();
        let child = Via::clean(names.iter().map(String::as_str));
        assert_eq!(child.names().len(), RECOMMEND_VIA_MAX);
        let chain = via("me", &r, Some(&child));
        assert_eq!(chain.names().len(), RECOMMEND_VIA_MAX);
        assert_eq!(chain.names()[0], "me");
        let hostile = Via::clean(["\u{1b}[2Jmallory"]);
        assert!(!via("me", &r, Some(&hostile)).names()[1].contains('\u{1b}'));
    }

    #[test]
    fn answers_decode_loosely_and_encode_as_before() {
        let reply: RecommendReply =
            serde_json::from_value(json!({"ok": true, "from": 5, "card": "c", "via": ["a", 3]}))
                .unwrap();
        assert_eq!((reply.from, reply.card.as_deref()), (None, Some("c")));
        assert_eq!(reply.via.names(), ["a"]);
        let out = RecommendReply {
            ok: true,
            from: Some("bob".into()),
            card: Some("c".into()),
            via: Via::default(),
        };
        assert_eq!(
            serde_json::to_value(&out).unwrap(),
            json!({"ok": true, "from": "bob", "card": "c"})
        );
    }
}
