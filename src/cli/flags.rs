//! The flag table: every command path of `peer`, `peer-dir` and `peer-res`, its words and its
//! flags with their value kinds and help lines. The shell completions are generated from it;
//! the tests in `flags_tests` hold each parser's accepted set, each `--help` text and each man
//! page's synopsis equal to it, so a flag added in one place and not the others fails a test.

/// What a flag takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Nothing: `--all`.
    Switch,
    /// A whole number (milliseconds included).
    Number,
    /// A file or directory.
    Path,
    /// Free text: an alias, an id, a topic.
    Text,
    /// One of a fixed list, completed by the shells.
    OneOf(&'static [&'static str]),
}

/// One `--flag`.
#[derive(Debug)]
pub(crate) struct Flag {
    pub long: &'static str,
    pub kind: Kind,
    pub help: &'static str,
}

/// One command path (`send`, `ask card show`, the whole `peer-dir` tool).
#[derive(Debug)]
pub(crate) struct Spec {
    /// `peer`, `peer-dir` or `peer-res`.
    pub program: &'static str,
    /// The words after the program that select this command; empty for a tool.
    pub path: &'static str,
    /// Fixed words completed after the path (actions, shells).
    pub words: &'static [&'static str],
    pub flags: &'static [Flag],
    /// Internal plumbing never typed by a person: parsed, but neither documented nor completed.
    pub hidden: bool,
}

const fn f(long: &'static str, kind: Kind, help: &'static str) -> Flag {
    Flag { long, kind, help }
}

const fn spec(
    program: &'static str,
    path: &'static str,
    words: &'static [&'static str],
    flags: &'static [Flag],
) -> Spec {
    Spec {
        program,
        path,
        words,
        flags,
        hidden: false,
    }
}

use Kind::{Number, OneOf, Path, Switch, Text};

/// Options `peer` takes before or after any command (parsed by `cli::parse_globals`).
pub(crate) const PEER_GLOBALS: &[Flag] = &[
    f("home", Path, "the peerwire home directory"),
    f("json", Switch, "one JSON object per result"),
    f("as", Text, "act as a short-lived root with this alias"),
    f("help", Switch, "show the usage"),
    f("version", Switch, "show the version"),
];

/// Options the `peer-dir` and `peer-res` tools take (no `--as`).
pub(crate) const TOOL_GLOBALS: &[Flag] = &[
    f("home", Path, "the peerwire home directory"),
    f("json", Switch, "one JSON object per result"),
    f("help", Switch, "show the usage"),
    f("version", Switch, "show the version"),
];

const ALIAS: Flag = f("alias", Text, "the alias peers address this session by");
const SESSION_ID: Flag = f("session-id", Text, "the stable session id");
const WORKSPACE: Flag = f("workspace", Path, "the workspace directory");
const REPLY_TO: Flag = f("reply-to", Text, "the message this answers");
const MESSAGE_ID: Flag = f("message-id", Text, "the message id");
const TOPIC: Flag = f("topic", Text, "a topic line");
const MODE: Flag = f(
    "mode",
    OneOf(&["ask", "auto", "deny"]),
    "the friend's consent mode",
);
const REPLACE: Flag = f("replace", Switch, "replace a friend of the same name");

const DIR_FLAGS: &[Flag] = &[
    f(
        "scope",
        OneOf(&["workspace", "repository", "machine"]),
        "which peers to list",
    ),
    f("query", Text, "only peers matching the text"),
    WORKSPACE,
    f("cursor", Text, "continue a listing"),
    f("all", Switch, "stale, invalid and out-of-scope records too"),
];

/// Every command path, in `peer --help` order.
pub(crate) const SPECS: &[Spec] = &[
    spec(
        "peer",
        "host",
        &[],
        &[
            ALIAS,
            SESSION_ID,
            WORKSPACE,
            f(
                "notify",
                OneOf(&["bell", "stderr", "none"]),
                "how new mail is announced",
            ),
        ],
    ),
    spec("peer", "dir", &[], DIR_FLAGS),
    spec(
        "peer",
        "send",
        &[],
        &[
            TOPIC,
            REPLY_TO,
            MESSAGE_ID,
            f(
                "wait-receipt",
                OneOf(&["accepted", "prepared", "consumed", "replied"]),
                "wait until the receipt reaches this state",
            ),
            f("timeout", Number, "milliseconds to wait for the receipt"),
        ],
    ),
    spec(
        "peer",
        "inbox",
        &[],
        &[
            f("all", Switch, "consumed messages too"),
            f("after", Number, "messages after this sequence number"),
            f("events-after", Number, "receipt events after this one"),
            f("from", Text, "only messages from this peer"),
            REPLY_TO,
            MESSAGE_ID,
            f("wait", Number, "milliseconds to wait for a message"),
            f("follow", Switch, "keep printing new messages"),
        ],
    ),
    spec("peer", "reply", &[], &[TOPIC]),
    spec(
        "peer",
        "consume",
        &[],
        &[f("note", Text, "a note for the sender")],
    ),
    spec("peer", "status", &[], &[]),
    spec("peer", "chat", &[], &[]),
    spec(
        "peer",
        "lab",
        &[],
        &[f("keep", Switch, "keep the lab's directory")],
    ),
    spec("peer", "mcp", &[], &[ALIAS, WORKSPACE, SESSION_ID]),
    spec(
        "peer",
        "run-child",
        &[],
        &[
            ALIAS,
            f(
                "delegate-control",
                Switch,
                "let the child run control resources",
            ),
        ],
    ),
    spec(
        "peer",
        "recover",
        &[],
        &[f("instance", Text, "the earlier incarnation"), SESSION_ID],
    ),
    spec(
        "peer",
        "run",
        &[],
        &[
            f("resource", Text, "the resource to hold"),
            f("capacity", Number, "the resource's capacity"),
            f("wait", Number, "milliseconds to wait for a grant"),
            f("ticket", Text, "an existing ticket"),
            f(
                "kill-on-release",
                Switch,
                "stop the command when the grant ends",
            ),
        ],
    ),
    spec(
        "peer",
        "res",
        &[
            "status",
            "request",
            "grant",
            "release",
            "cancel",
            "set-controller",
        ],
        &[
            f("capacity", Number, "the resource's capacity"),
            f("wait", Number, "milliseconds to wait for a grant"),
            f("epoch", Number, "the controller epoch"),
            f("token", Number, "the fencing token"),
            f("ticket", Text, "the ticket"),
            f("force", Switch, "release or take over regardless"),
            f("automatic", Switch, "hand control back to automatic grants"),
        ],
    ),
    spec(
        "peer",
        "ask",
        &[],
        &[
            f("context-file", Path, "a file the friend may read"),
            f("async", Switch, "return the ask id at once"),
        ],
    ),
    spec("peer", "ask status", &[], &[]),
    spec(
        "peer",
        "ask serve",
        &[],
        &[f("listen", Text, "HOST:PORT to listen on")],
    ),
    spec("peer", "ask pending", &[], &[]),
    spec("peer", "ask decide", &["approve", "decline"], &[]),
    spec(
        "peer",
        "ask answer",
        &[],
        &[
            f("from-workspace", Switch, "answer from the workspace"),
            f("max-matches", Number, "at most this many excerpts"),
        ],
    ),
    spec("peer", "ask token", &["new"], &[]),
    spec(
        "peer",
        "ask peers",
        &[],
        &[f(
            "refresh",
            Switch,
            "fetch every friend's advertisement now",
        )],
    ),
    spec(
        "peer",
        "ask card show",
        &[],
        &[
            f("host", Text, "the host the card names"),
            f("port", Number, "the port the card names"),
        ],
    ),
    spec("peer", "ask card verify", &[], &[]),
    spec("peer", "ask card add", &[], &[MODE, REPLACE]),
    spec(
        "peer",
        "ask recommend",
        &[],
        &[
            f("topic", Text, "what the recommended friend should know"),
            f("max-hops", Number, "how many agents the request may pass"),
        ],
    ),
    spec("peer", "ask friends pending", &[], &[]),
    spec(
        "peer",
        "ask friends decide",
        &["add", "decline"],
        &[MODE, REPLACE],
    ),
    Spec {
        program: "peer",
        path: "ask sandbox-exec",
        words: &[],
        flags: &[
            f("scratch", Path, ""),
            f("workspace", Path, ""),
            f("read", Path, ""),
            f("hide", Path, ""),
            f("proxy", Path, ""),
            f("memory-mb", Number, ""),
            f("cpu-seconds", Number, ""),
            f("processes", Number, ""),
            f("reduced", Switch, ""),
            f("allow-unenforced", Switch, ""),
            f("no-namespaces", Switch, ""),
            f("probe", Switch, ""),
            f("init", Switch, ""),
            f("launcher", Number, ""),
            f("server", Number, ""),
        ],
        hidden: true,
    },
    spec(
        "peer",
        "bench",
        &[],
        &[
            f("quick", Switch, "a short run"),
            f("json", Switch, "one JSON report"),
            f("senders", Text, "sender counts, comma-separated"),
            f("messages", Number, "messages per sender"),
            f("dir", Path, "where the benchmark's namespaces live"),
            f("keep", Switch, "keep the benchmark's directory"),
        ],
    ),
    spec("peer", "completions", &["bash", "zsh", "fish"], &[]),
    spec("peer-dir", "", &[], DIR_FLAGS),
    spec("peer-res", "", &[], &[]),
];

/// The global options of a program.
pub(crate) fn globals(program: &str) -> &'static [Flag] {
    if program == "peer" {
        PEER_GLOBALS
    } else {
        TOOL_GLOBALS
    }
}

/// The specs a person may see: not hidden.
pub(crate) fn visible() -> impl Iterator<Item = &'static Spec> {
    SPECS.iter().filter(|s| !s.hidden)
}

/// The flag names (without `--`) one command path accepts, for parsers that share one loop
/// between several paths and then narrow it.
pub(crate) fn names(program: &str, path: &str) -> Vec<&'static str> {
    SPECS
        .iter()
        .filter(|s| s.program == program && s.path == path)
        .flat_map(|s| s.flags.iter().map(|f| f.long))
        .collect()
}

#[cfg(test)]
#[path = "flags_tests.rs"]
mod tests;
