//! Internal bounds: every fixed limit that `sessions.communication.limits` does not expose, in
//! one place. Changing one is a code change, reviewed with the module that uses it; the
//! configurable ones are the `limits!` table in `config`. This module imports nothing, so any
//! layer may use it.
#![forbid(unsafe_code)]

// Identifiers, names and text.

/// Longest id we generate and accept on the wire and in tool arguments (`[A-Za-z0-9_.-]`):
/// message, session, run and correlation ids.
pub const ID_CHARS_MAX: usize = 96;
/// Shortest message-id prefix a person may type for a whole id (`m-` plus four characters).
pub const MESSAGE_ID_PREFIX_MIN: usize = 6;
/// Longest alias or peerId a target may name (an alias plus its `@`).
pub const TARGET_NAME_CHARS_MAX: usize = 100;
/// Longest `list_peers.query`, in characters.
pub const QUERY_CHARS_MAX: usize = 200;
/// Longest `send_peer_message.topic`, in characters.
pub const TOPIC_CHARS_MAX: usize = 200;
/// Longest resource name argument, in characters.
pub const RESOURCE_CHARS_MAX: usize = 256;
/// Longest string kept from any presence field.
pub const PRESENCE_FIELD_CHARS_MAX: usize = 4096;
/// Longest attribute value in an MCP peer-message wrapper, in characters.
pub const WRAP_ATTRIBUTE_CHARS_MAX: usize = 200;
/// Longest piece of a peer-supplied name (a method, an id) quoted back in an error message.
pub const ECHO_CHARS_MAX: usize = 64;

// Files read whole (bounded before parsing).

/// Largest `config.json`.
pub const CONFIG_FILE_BYTES_MAX: u64 = 1 << 20;
/// Largest control file (endpoint and per-root secret).
pub const CONTROL_FILE_BYTES_MAX: u64 = 4096;
/// Largest store identity file.
pub const IDENTITY_FILE_BYTES_MAX: u64 = 64 * 1024;
/// Largest `/proc/PID/stat` read (the comm field is at most 64 bytes; the rest is numbers).
pub const PROC_STAT_BYTES_MAX: u64 = 4096;
/// Directories walked up from a workspace looking for the repository's `.git`.
pub const REPOSITORY_DEPTH_MAX: usize = 64;
/// Largest `.git` pointer file or `commondir` file of a linked git work tree read.
pub const GIT_POINTER_BYTES_MAX: u64 = 4096;

// Sockets.

/// `sun_path` holds 108 bytes including the terminating NUL.
pub const SOCKET_PATH_BYTES_MAX: usize = 107;
/// Bytes read from a socket at once.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;

// The message store.

/// Estimated bytes of bookkeeping per stored object beyond its strings (JSON keys, numbers).
pub const ENTRY_OVERHEAD_BYTES: u64 = 384;
/// An accepted message keeps its body (to be sent again if the recipient loses its copy)
/// only while the custody state's live bytes are under this: the sender's memory stays
/// bounded however many messages wait unread; past it an accepted message keeps a digest,
/// as any resolved one does, and cannot be repaired.
pub const KEEP_ACCEPTED_BODIES_BELOW_BYTES: u64 = 1 << 20;
/// Bytes reserved at admission for the receipt transitions, pushes and events a message
/// will still produce (four transitions of about one overhead each).
pub const RECEIPT_RESERVE_BYTES: u64 = 4 * ENTRY_OVERHEAD_BYTES;
/// Receipt events (`peer_messages` `events`) kept per local peer: recording one more drops
/// that peer's oldest. The outbox entry keeps the current receipt; the feed is for changes a
/// reader has not seen yet, and a reader further behind skips to the oldest kept.
pub const RECEIPT_EVENTS_KEPT: usize = 1024;
/// Longest slice a store reader sleeps before re-checking its cancellation flag.
pub const CANCEL_POLL_MS: u64 = 50;
/// Longest a journal frame holding only records that need not be durable before their answer
/// (a sender's copy of a recipient's receipt) stays written but not fdatasynced while the
/// store is quiet; the next durable batch, a read of durable state or a close syncs it sooner.
pub const DEFERRED_SYNC_MS: u64 = 100;

// The root runtime.

/// How often the root worker looks at routes and retention without being woken.
pub const WORKER_TICK_MS: u64 = 250;
/// Longest interval between retention sweeps.
pub const RETENTION_SWEEP_MS: u64 = 60_000;
/// Longest wait between attempts to push receipts to a sender that keeps failing with a
/// retryable answer (stopped or not answering; a sender proven gone is dropped instead).
pub const PUSH_RETRY_MAX_MS: u64 = 30_000;
/// Receipts pushed per worker pass.
pub const PUSH_BATCH: usize = 32;
/// Routes the retry worker looks at per pass.
pub const ROUTES_PER_PASS: usize = 64;
/// Receipt subscriptions (`peer.subscribe`) remembered at once.
pub const SUBSCRIPTIONS_MAX: usize = 1024;
/// Local peers whose model-shown cursors are remembered at once.
pub const MODEL_CURSORS_MAX: usize = 1024;
/// Presence advertisements cached at once.
pub const ADVERTS_MAX: usize = 1_024;
/// Retired runs remembered for `TARGET_ENDED` answers.
pub const RETIRED_REMEMBERED_MAX: usize = 1024;
/// Events queued per event-bus subscriber before newer ones are dropped for it.
pub const SUBSCRIBER_QUEUE: usize = 256;
/// Event-bus subscribers kept at once.
pub const SUBSCRIBERS_MAX: usize = 64;
/// Conversations the auto handler's reply budget remembers before the oldest are forgotten.
pub const BUDGET_CONVERSATIONS_MAX: usize = 4096;
/// Arrivals queued for the auto handler; beyond it they coalesce into the next run.
pub const ARRIVALS_QUEUED_MAX: usize = 64;
/// Extra time a command-line client waits beyond a call's own wait for its root's answer.
pub const ANSWER_MARGIN_MS: u64 = 30_000;

// Front ends.

/// MCP tool calls that run at once; further calls queue (up to `limits.pendingRequests`).
pub const MCP_WORKERS: usize = 4;
/// Lines of `peer chat` history kept.
pub const CHAT_HISTORY_MAX: usize = 500;
/// Longest line the `peer chat` composer accepts, in characters.
pub const CHAT_LINE_CHARS_MAX: usize = 8_000;
/// Longest CSI parameter run `peer chat` keeps; a longer one is still read to its final byte.
pub const CHAT_CSI_PARAMS_MAX: usize = 16;
/// How long one wait of `peer inbox --follow` lasts before it looks at its output again.
pub const FOLLOW_SLICE_MS: u64 = 1_000;
/// Most pages a person's `peer inbox` prints in one run; the last line says how to go on.
pub const INBOX_PAGES_MAX: usize = 1_000;
/// Room kept in a frame for the JSON-RPC envelope and the page's own fields around the
/// messages and events of a `peer_messages` page.
pub const PAGE_ENVELOPE_BYTES: u64 = 1_024;
/// Longest directory cursor a tool argument may carry, in characters.
pub const CURSOR_CHARS_MAX: usize = 256;
/// Longest directory key a cursor may decode to, in bytes.
pub const CURSOR_KEY_BYTES_MAX: usize = 512;
