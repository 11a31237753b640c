//! Internal bounds: every fixed limit that `sessions.communication.limits` does not expose, in
//! one place. Changing one is a code change, reviewed with the module that uses it; the
//! configurable ones are the `limits!` table in `config`. This module imports nothing of the
//! crate, so any layer may use it; peer-config(5)'s INTERNAL BOUNDS lists every entry.
#![forbid(unsafe_code)]

use std::time::Duration;

// Identifiers, names and text.

// Message, session, run and correlation ids, all `[A-Za-z0-9_.-]`.
/// Longest id we generate and accept on the wire and in tool arguments.
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
/// Longest alias accepted anywhere, in characters: short enough to type and to fit a column.
pub const ALIAS_CHARS_MAX: usize = 48;
/// Longest recipient/sender tool argument: an alias and its optional `@` (a peer id is shorter).
pub const TARGET_CHARS_MAX: usize = ALIAS_CHARS_MAX + 1;
/// Longest canonical resource name, in characters: room for a path or URL, still one line.
pub const RESOURCE_NAME_CHARS_MAX: usize = 200;

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
/// Largest cgroup control file read (`cgroup.events`, `/proc/self/cgroup`, mountinfo lines).
pub const CGROUP_FILE_BYTES_MAX: u64 = 64 * 1024;
/// Longest `/proc/self/mountinfo` read: far beyond a machine's mounts, still bounded.
pub const MOUNTINFO_BYTES_MAX: u64 = 1 << 20;

// Processes.

/// Deepest parent chain `process::descends_from` follows: deeper than real trees, never a loop.
pub const PARENT_WALK_MAX: usize = 256;

// Sockets.

/// `sun_path` holds 108 bytes including the terminating NUL.
pub const SOCKET_PATH_BYTES_MAX: usize = 107;
/// Bytes read from a socket at once.
pub const READ_CHUNK_BYTES: usize = 16 * 1024;

// The wire: frames, JSON-RPC and pooled connections.

/// Longest JSON-RPC string id accepted: ids name transport attempts and stay short.
pub const RPC_ID_BYTES_MAX: usize = 128;
/// Longest JSON-RPC method name accepted: every method we answer is far shorter.
pub const RPC_METHOD_BYTES_MAX: usize = 64;
/// Room in a frame for all of a `peer.send` but its content (envelope, ids, names).
pub const FRAME_ENVELOPE_BYTES: u64 = 4_096;
// How long a connection must go without requests before its background thread reads again
// (notifications, hang-ups) and before the next request probes liveness with a syscall.
// Requests in quick succession read their own answers and skip the probe; a notification
// that arrives right after a burst waits at most this long. It is also how often the
// background thread looks while requests keep coming: at 1 ms a sender sending one message
// per durable round trip (about 1 ms) woke it about 1.4 times per message, at 10 ms it wakes
// about once per 10 ms of sending.
/// Quiet time before a pooled connection's reader looks again and a request probes liveness.
pub const POOL_QUIET: Duration = Duration::from_millis(10);
// How often the background thread looks again while requests are in flight (they read the
// connection themselves meanwhile). Not `POOL_QUIET`: under 64 concurrent senders a request is in
// flight for ~15 ms, so a 10 ms recheck woke every sender's reader about 1.6 times per
// message for nothing. The cost is that a notification arriving just after a burst may wait
// this long; notifications on outbound connections are advisory (`peer.receipt` updates of
// a subscription; the durable copy arrives as a request), and a hang-up is also noticed by
// the next request's liveness probe.
/// How often a pooled connection's reader looks again while requests are in flight.
pub const POOL_BUSY_RECHECK: Duration = Duration::from_millis(100);

// The message store.

/// Estimated bytes of bookkeeping per stored object beyond its strings (JSON keys, numbers).
pub const ENTRY_OVERHEAD_BYTES: u64 = 384;
// An accepted message keeps its body (to be sent again if the recipient loses its copy) only
// while the custody state's live bytes are under this: the sender's memory stays bounded
// however many messages wait unread; past it an accepted message keeps a digest, as any
// resolved one does, and cannot be repaired.
/// Custody-state bytes under which an accepted message keeps its body for repair.
pub const KEEP_ACCEPTED_BODIES_BELOW_BYTES: u64 = 1 << 20;
/// Bytes reserved at admission for a message's later receipts: four transitions of one overhead.
pub const RECEIPT_RESERVE_BYTES: u64 = 4 * ENTRY_OVERHEAD_BYTES;
// Recording one more drops that peer's oldest. The outbox entry keeps the current receipt;
// the feed is for changes a reader has not seen yet, and a reader further behind skips to the
// oldest kept.
/// Receipt events (`peer_messages` `events`) kept per local peer.
pub const RECEIPT_EVENTS_KEPT: usize = 1024;
/// Longest slice a store reader sleeps before re-checking its cancellation flag.
pub const CANCEL_POLL_MS: u64 = 50;
// Such records are a sender's copy of a recipient's receipt; the next durable batch, a read
// of durable state or a close syncs them sooner.
/// Longest a frame of records not needed durable before their answer waits unsynced.
pub const DEFERRED_SYNC_MS: u64 = 100;
/// Buffer between the snapshot serialiser and its temp file: few write calls, little memory.
pub const SNAPSHOT_WRITE_BUFFER_BYTES: usize = 64 * 1024;
/// The most reserved up front for one journal frame (a larger batch grows its buffer).
pub const FRAME_CAPACITY_MAX: usize = 64 * 1024;
/// Largest chunk of zero-filled room the writer adds to the journal at once.
pub const PREALLOC_CHUNK_BYTES: u64 = 256 * 1024;
/// Zeros written per call while preallocating journal room: one bounded buffer, reused.
pub const ZERO_FILL_PIECE_BYTES: u64 = 64 * 1024;

// Presence.

/// Names per `presenceFiles` a listing may look at (newest first) to find the current ones.
pub const PRESENCE_SCAN_FACTOR: usize = 16;
/// How long a looked-up advertisement is reused: one second keeps sends off the disk.
pub const ADVERT_TTL_MS: u128 = 1_000;
// A presence directory whose mtime is younger than this may change again within the same
// coarse timestamp, so a resolution read under it is not reused.
//
// The kernel stamps a directory's mtime from the coarse real-time clock, which advances once
// per scheduler tick (at most 10 ms: `CONFIG_HZ` is at least 100) and lags the fine clock we
// read `now` from by less than one tick. A change made after we read the directory is stamped
// at least `now - 1 tick`; an mtime at least two ticks older than `now` therefore differs from
// every later stamp, so a later change is always seen as a new mtime. 25 ms is that bound for
// the coarsest tick, with margin. It was 100 ms: every root's heartbeat rewrites its record
// (a rename into the directory) every `heartbeatMs`, so with 65 roots the directory was
// younger than 100 ms about three quarters of the time and most sends by name rescanned it
// (a readdir and a statx per record); at 25 ms about a quarter of them do.
/// Age at which a presence directory's mtime has settled (two coarse clock ticks, with margin).
pub const MTIME_SETTLED_MS: u128 = 25;
// `MTIME_SETTLED_MS` for an mtime without a sub-second part: a filesystem that stamps whole
// seconds (ext4 with 128-byte inodes) or two (FAT) gives every change within that span the
// same mtime, so such a stamp has settled only once the span and a tick have passed.
/// `MTIME_SETTLED_MS` for whole-second mtimes (ext4 small inodes, FAT's two seconds).
pub const WHOLE_SECOND_MTIME_SETTLED_MS: u128 = 3_000;
// How long a read of the presence directory's mtime is reused before it is read again.
//
// Every send by name needs the mtime (a cached resolution is valid only under the mtime it
// was read under), and reading it is a statx(2) per send. Reusing a read for this long means
// a record written, replaced or removed is noticed by a send by name at most this much later:
// a target that restarted under the same alias within this window is still resolved to its
// old incarnation. That send then ends exactly like a send racing a restart always could
// (the delay between resolution and delivery is the same kind of window, only shorter):
// the old incarnation cannot be reached, its cached advertisement and every name resolved to
// it are forgotten (`forget_advertisement`), and its presence record being gone makes the
// route's retry answer `TARGET_ENDED`; the next send by that name reads the directory again
// and finds the new incarnation. The window is short beside the advertisement cache's
// (`ADVERT_TTL_MS`, for which a looked-up incarnation's liveness is trusted anyway), and it
// counts from the read, not from the last send: a stream of sends does not extend it.
/// How long a read of the presence directory's mtime is reused by sends by name.
pub const NAME_RECHECK_MS: u64 = 50;

// The root runtime.

/// How often the root worker looks at routes and retention without being woken.
pub const WORKER_TICK_MS: u64 = 250;
/// Longest interval between retention sweeps.
pub const RETENTION_SWEEP_MS: u64 = 60_000;
// A sender proven gone is dropped instead.
/// Longest wait between receipt pushes to a sender that keeps failing with a retryable answer.
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
/// A route that gave up is tried again after this long.
pub const GAVE_UP_RETRY_MS: u64 = 5_000;
/// Dead roots' records reclaimed per pass at most, so one pass stays short.
pub const RECLAIM_PER_PASS: usize = 256;
/// Store directories looked at per start when adopting dead predecessors' entries.
pub const STORES_SCANNED_MAX: usize = 4096;
/// Background failures remembered for `local.info`: the newest few are what an operator needs.
pub const PROBLEMS_MAX: usize = 16;
/// Target sessions remembered (records reclaimed once they end, vouched stores).
pub const TARGET_SESSIONS_MAX: usize = 1024;
/// How often the worker looks for lost recipient copies while accepted messages are held.
pub const REPAIR_CHECK_EVERY_MS: u64 = 2_000;
/// How often a root holding no accepted message looks again: an idle root stays under 1 wake/s.
pub const REPAIR_IDLE_LOOK_MS: u64 = 10_000;
/// Distinct targets looked up in presence per repair pass.
pub const REPAIR_TARGETS_PER_PASS: usize = 64;
/// `peer.status` questions asked per repair pass.
pub const REPAIR_CHECKS_PER_PASS: usize = 32;
/// Presence records of one session read when looking for its successor.
pub const SUCCESSOR_RECORDS_MAX: usize = 8;
/// Store directories looked at when answering about a predecessor.
pub const PREDECESSOR_STORES_MAX: usize = 4096;

// Resource coordination.

/// Longest configurable `resourceWaitTimeoutMs`: a week.
pub const RESOURCE_WAIT_TIMEOUT_MS_MAX: u64 = 7 * 24 * 60 * 60 * 1000;
/// Process groups `peer run` records per launch, at most.
pub const TRACKED_GROUPS_MAX: usize = 32;
/// How often `peer run` looks for descendants that left the command's process group.
pub const GROUP_SCAN_MS: u64 = 200;

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
/// Room in a frame for the envelope and own fields around a `peer_messages` page's items.
pub const PAGE_ENVELOPE_BYTES: u64 = 1_024;
/// Longest directory cursor a tool argument may carry, in characters.
pub const CURSOR_CHARS_MAX: usize = 256;
/// Longest directory key a cursor may decode to, in bytes.
pub const CURSOR_KEY_BYTES_MAX: usize = 512;
/// How long `peer host`'s main thread lets events gather after a look that found some.
pub const HOST_EVENT_GATHER: Duration = Duration::from_millis(2);
/// How long a synchronous `peer ask` runs before the asker is told it is waiting.
pub const ASK_WAIT_NOTICE_AFTER: Duration = Duration::from_millis(1500);

// Benchmarks (`peer bench`).

/// Most concurrent sender processes in one throughput run (each is a `peer host`).
pub const BENCH_SENDERS_MAX: usize = 256;
/// Most throughput runs in one benchmark.
pub const BENCH_SENDER_RUNS_MAX: usize = 8;
/// Most measured warm sends (`peer bench --messages`).
pub const BENCH_MESSAGES_MAX: u64 = 100_000;
/// Most CPUs the per-CPU fdatasync floor is measured on, so a large machine stays quick.
pub const BENCH_CPUS_PLACED_MAX: usize = 8;
/// Window between the two `/proc/stat` readings that judge the machine idle.
pub const BENCH_IDLE_WINDOW_MS: u64 = 200;
/// Most `/proc` entries scanned for other CPU users.
pub const BENCH_PROCESSES_MAX: usize = 4096;
/// Bytes read from one `/proc` file.
pub const BENCH_PROC_FILE_BYTES: u64 = 64 * 1024;
/// A long poll's `waitMs` in the inbox-latency phase.
pub const BENCH_POLL_WAIT_MS: u64 = 300;
/// Longest wait for the long poll to report one probe.
pub const BENCH_PROBE_MS: u64 = 20_000;
/// Interval of the process-counter sampler.
pub const BENCH_SAMPLE_MS: u64 = 20;
/// Settling time before the idle counters are read.
pub const BENCH_SETTLE_MS: u64 = 200;
/// Polls of a sender's sync count, `BENCH_SETTLE_STEP_MS` apart, until it stops moving.
pub const BENCH_SETTLE_TRIES: usize = 20;
/// Interval between those polls.
pub const BENCH_SETTLE_STEP_MS: u64 = 5;
/// Failure messages kept for the report.
pub const BENCH_FAILURES_KEPT: usize = 10;
/// Longest answer line read from the MCP server under test.
pub const BENCH_MCP_LINE_BYTES: usize = 1 << 20;
/// Bytes read from the MCP server's stdout at a time.
pub const BENCH_MCP_READ_BYTES: usize = 64 * 1024;
/// Longest wait for `initialize` (the server starts a root first).
pub const BENCH_MCP_START_MS: u64 = 30_000;
/// Longest wait for the MCP server to exit after its stdin closed.
pub const BENCH_MCP_STOP_MS: u64 = 5_000;
/// Longest wait for one custody receipt (loaded two-core machines included).
pub const BENCH_SEND_TIMEOUT_MS: u64 = 10_000;
/// Extra time allowed beyond a long poll's own `waitMs`.
pub const BENCH_POLL_MARGIN_MS: u64 = 5_000;
/// Longest wait for every host's ready line.
pub const BENCH_READY_MS: u64 = 30_000;
/// Longest wait for a host to exit after SIGTERM before SIGKILL.
pub const BENCH_HOST_STOP_MS: u64 = 5_000;
/// Poll interval while waiting for ready lines and exits.
pub const BENCH_POLL_MS: u64 = 2;
/// Bytes of a host's output file read while looking for its ready line.
pub const BENCH_READY_LINE_BYTES: usize = 64 * 1024;
/// Characters of a host's stderr quoted in an error.
pub const BENCH_STDERR_TAIL_CHARS: usize = 400;

// Ask: the friend-to-friend server, clients, discovery and answerer.

/// Sessions shown in (and kept from) one advert.
pub const ADVERT_SESSIONS_MAX: usize = 32;
/// Longest description of an agent (configured, advertised or on a card), in characters.
pub const ASK_DESCRIPTION_CHARS_MAX: usize = 1000;
/// Most tags of an agent (configured, advertised or on a card).
pub const ASK_TAGS_MAX: usize = 32;
/// Longest tag of an agent, in characters.
pub const ASK_TAG_CHARS_MAX: usize = 64;
/// Longest other string field kept from an advert (names, ids, workspace, topics).
pub const ADVERT_FIELD_CHARS_MAX: usize = 200;
/// How far an advert's `updatedAt` may lie in the future (clock skew).
pub const ADVERT_FUTURE_SKEW_MS: u64 = 5 * 60 * 1000;
/// Largest advert body read from a friend.
pub const ADVERT_BYTES_MAX: usize = 64 * 1024;
/// Timeout of one advert fetch (dsh: 3 s for the roster, 2.5 s for recommend).
pub const ADVERT_FETCH_MS: u64 = 2_500;
/// Friends fetched at once by one roster refresh.
pub const ADVERT_FETCH_PARALLEL: usize = 8;
/// Friends kept in the roster.
pub const ROSTER_MAX: usize = 256;
/// Shortest refresh interval honoured, so a tiny `rosterRefreshMs` cannot become a storm.
pub const ROSTER_REFRESH_MS_MIN: u64 = 1_000;
/// Largest roster file read.
pub const ROSTER_FILE_BYTES_MAX: u64 = 4 << 20;
/// Lifetime of a card we issue, and of a received card whose `ttl` is missing or not positive.
pub const CARD_TTL_MS: u64 = 90 * 24 * 60 * 60 * 1000;
/// Longest card string accepted, checked before decoding (a real card is about 600 to 1500).
pub const CARD_CHARS_MAX: usize = 8192;
/// How far in the future `issued` may lie (clock skew between two machines); dsh accepts any.
pub const CARD_ISSUED_SKEW_MS: u64 = 60 * 60 * 1000;
/// Longest agent name (ours, a friend's, a card's), in characters.
pub const ASK_NAME_CHARS_MAX: usize = 64;
/// Longest host in a card (a DNS name is at most 253).
pub const CARD_HOST_CHARS_MAX: usize = 253;
/// Most friends in `ask.peers`.
pub const ASK_FRIENDS_MAX: usize = 256;
/// Longest friend token, in characters.
pub const ASK_TOKEN_CHARS_MAX: usize = 512;
/// A token's shortest length when it is all hex digits (4 bits a character: 128 bits).
pub const ASK_TOKEN_HEX_CHARS_MIN: usize = 32;
/// A token's shortest length otherwise (base64url carries 6 bits a character: 132 bits).
pub const ASK_TOKEN_CHARS_MIN: usize = 22;
/// Distinct characters a token needs, so `aaaa...` or `abab...` cannot pass on length alone.
pub const ASK_TOKEN_DISTINCT_MIN: usize = 8;
/// Longest configured host name, in characters.
pub const ASK_HOST_CHARS_MAX: usize = 255;
/// Longest configured card URL, in characters.
pub const ASK_CARD_URL_CHARS_MAX: usize = 2048;
/// Most arguments of a configured `answerCommand`.
pub const ANSWER_ARGV_MAX: usize = 64;
/// Most `answerReadPaths`.
pub const ANSWER_READ_PATHS_MAX: usize = 32;
/// How long a friend add waits for `config.json`'s lock.
pub const ASK_CONFIG_LOCK_WAIT_MS: u64 = 5_000;
/// Longest friend name an ask tool takes, in characters.
pub const ASK_PEER_CHARS_MAX: usize = 64;
/// Longest question an ask tool takes, in characters.
pub const ASK_TOOL_QUESTION_CHARS_MAX: usize = 16_000;
/// Most context files per ask.
pub const ASK_CONTEXT_FILES_MAX: usize = 16;
/// Longest context file path, in characters.
pub const ASK_CONTEXT_FILE_CHARS_MAX: usize = 512;
/// Friends one `ask_peers` call may ask.
pub const ASK_PEERS_MAX: usize = 8;
/// Shortest `timeoutMs` of an ask.
pub const ASK_TIMEOUT_MS_MIN: u64 = 1_000;
/// Longest `timeoutMs` of an ask.
pub const ASK_TIMEOUT_MS_MAX: u64 = 600_000;
/// Longest `ask_result` wait.
pub const ASK_RESULT_WAIT_MS_MAX: u64 = 600_000;
/// `ask_result`'s wait when not told.
pub const ASK_RESULT_WAIT_MS_DEFAULT: u64 = 30_000;
/// Longest ask id an ask tool takes, in characters.
pub const ASK_ID_CHARS_MAX: usize = 128;
/// Longest recommend topic, in characters.
pub const RECOMMEND_TOPIC_CHARS_MAX: usize = 200;
/// Hops a recommend request may travel beyond the friend asked (dsh caps at 3 too).
pub const RECOMMEND_HOPS_MAX: u64 = 3;
/// Hops `recommend_peer` asks for when not told.
pub const RECOMMEND_HOPS_DEFAULT: u64 = 1;
/// Longest question the ask server accepts, in characters.
pub const ASK_QUESTION_CHARS_MAX: usize = 32_000;
/// Friends a node forwards one request to.
pub const RECOMMEND_FAN_OUT: usize = 2;
/// Friends whose card a node fetches before giving up on the direct answer.
pub const RECOMMEND_DIRECT_TRIES: usize = 3;
/// Friends considered at all per request (dsh fetched every friend's advert).
pub const RECOMMEND_CANDIDATES_MAX: usize = 16;
/// Longest `path` (agents visited) of a recommend request.
pub const RECOMMEND_PATH_MAX: usize = 8;
/// Longest name in a recommend `path` or `via`, in characters.
pub const RECOMMEND_PATH_NAME_CHARS_MAX: usize = 64;
/// Longest `via` chain kept from an answer: the path bound plus the answering node.
pub const RECOMMEND_VIA_MAX: usize = RECOMMEND_PATH_MAX + 1;
/// Timeout of one card fetch (dsh: 2.5 s).
pub const CARD_FETCH_MS: u64 = 2_500;
/// Timeout of one forwarded recommend per hop it may still travel (dsh: 4 s).
pub const RECOMMEND_FORWARD_MS_PER_HOP: u64 = 4_000;
/// How long a computed advert is reused (`/advertise` reads presence at most once a second).
pub const ADVERT_CACHE_MS: u64 = 1_000;
/// A roster advert younger than this is used by `/recommend` without fetching again.
pub const ROSTER_FRESH_MS: u64 = 120_000;
/// Friends asked at once by one `ask_peers` call.
pub const ASK_PARALLEL: usize = 4;
/// How often `ask_result` polls a friend's `/ask/status`.
pub const ASK_RESULT_POLL: std::time::Duration = std::time::Duration::from_millis(500);
/// Longest string kept from a friend's advert or card in a tool result.
pub const ASK_TOOL_FIELD_CHARS_MAX: usize = 1000;
/// How long a recommendation waits for the owner.
pub const RECOMMEND_PENDING_TTL_MS: u64 = 24 * 60 * 60 * 1000;
/// Most recommendations waiting at once; more are refused with `QUEUE_FULL`.
pub const RECOMMEND_PENDING_MAX: usize = 64;
/// Largest recommendations file read.
pub const RECOMMEND_FILE_BYTES_MAX: u64 = 1 << 20;
/// How long a recommendations writer waits for the file's lock.
pub const RECOMMEND_LOCK_WAIT_MS: u64 = 5_000;
/// A sign is always 159 characters; anything much longer is not worth decoding.
pub const SIGN_KEY_CHARS_MAX: usize = 512;
/// JSON nesting accepted in a signed body (serde_json itself stops at 128).
pub const CANON_DEPTH_MAX: usize = 64;
/// Accepted clock difference for a signed request's `timestamp`.
pub const ASK_SIGNATURE_WINDOW_MS: u64 = 5 * 60 * 1000;
/// Addresses tracked by the failure limiter.
pub const ASK_ADDRESSES_MAX: usize = 4_096;
/// Random bytes of the nonce in a signed body.
pub const ASK_NONCE_BYTES: usize = 16;
/// Nonces remembered per friend; a full set refuses only its friend.
pub const REPLAY_PER_FRIEND_MAX: usize = 4_096;
/// How long a nonce is kept after it was seen (twice the signature window).
pub const REPLAY_KEEP_MS: u64 = 2 * ASK_SIGNATURE_WINDOW_MS;
/// Bytes read back from one friend's nonce file (lines are under 40 bytes).
pub const REPLAY_FILE_BYTES_MAX: u64 = 2 * REPLAY_PER_FRIEND_MAX as u64 * 48;
/// Largest response the ask client accepts (head and body).
pub const ASK_RESPONSE_BYTES_MAX: usize = 4 << 20;
/// Headers per response the ask client accepts.
pub const ASK_RESPONSE_HEADERS_MAX: usize = 48;
/// Largest ask server request head (request line and headers).
pub const ASK_HEAD_BYTES_MAX: usize = 16 * 1024;
/// Largest ask server request body, as in dsh-ask-peer.
pub const ASK_BODY_BYTES_MAX: usize = 1 << 20;
/// Headers per ask server request.
pub const ASK_HEADERS_MAX: usize = 48;
/// Bytes the ask server reads from a connection at a time.
pub const ASK_READ_CHUNK_BYTES: usize = 8 * 1024;
/// Most request-body bytes the ask server discards after an early refusal.
pub const ASK_DRAIN_BYTES_MAX: usize = 8 << 20;
/// Longest time the ask server spends discarding them.
pub const ASK_DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(3);
/// How long an ask server response write may take before the client is dropped.
pub const ASK_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often the ask server's acceptor looks at its stop flag.
pub const ASK_ACCEPT_POLL_MS: u16 = 200;
/// Largest ask private key file read.
pub const ASK_KEY_FILE_BYTES_MAX: u64 = 4096;
/// Bytes of answerer output read at most (beyond this the answer is cut anyway).
pub const ANSWER_OUTPUT_BYTES_MAX: usize = 4 << 20;
/// Longest context-file path handed to the answerer, in characters.
pub const ANSWER_PATH_CHARS_MAX: usize = 1024;
/// How often the answer runner looks whether the answerer exited.
pub const ANSWER_EXIT_POLL: std::time::Duration = std::time::Duration::from_millis(5);
/// How long the rest of the answerer's output may take once its group is gone.
pub const ANSWER_OUTPUT_GRACE: std::time::Duration = std::time::Duration::from_millis(500);
/// Bytes of stdin the workspace answerer reads at most (question and context files).
pub const WORKSPACE_ANSWER_INPUT_BYTES_MAX: usize = 16 << 20;
/// Characters of one excerpt line of the workspace answerer.
pub const WORKSPACE_ANSWER_EXCERPT_CHARS: usize = 200;
/// Terms the workspace answerer takes from one question.
pub const WORKSPACE_ANSWER_TERMS_MAX: usize = 12;
/// Candidate lines the workspace answerer keeps before ranking.
pub const WORKSPACE_ANSWER_CANDIDATES_MAX: usize = 20_000;
/// Connections the answerer's in-sandbox forwarder carries at once.
pub const SANDBOX_TUNNELS_MAX: usize = 16;
/// Bytes of sandbox probe output read at most.
pub const SANDBOX_PROBE_OUTPUT_MAX: usize = 256;
/// Deepest the sandbox walks to list readable roots around protected directories.
pub const SANDBOX_WALK_DEPTH_MAX: usize = 32;
/// Directory entries that sandbox walk reads per directory.
pub const SANDBOX_DIR_ENTRIES_MAX: usize = 4_096;
/// Tunnels the answerer's CONNECT proxy carries at once.
pub const EGRESS_TUNNELS_MAX: usize = 16;
/// Largest CONNECT request head the proxy reads.
pub const EGRESS_HEAD_BYTES_MAX: usize = 4096;
/// How long the proxy waits for a CONNECT request head.
pub const EGRESS_HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long the proxy waits for an allowed destination to accept.
pub const EGRESS_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// A proxy tunnel with no bytes either way for this long ends.
pub const EGRESS_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// Timeout of fetching an A2A agent card.
pub const A2A_CARD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Timeout of one A2A JSON-RPC call that does not wait for an answer.
pub const A2A_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How often the A2A client polls a task it waits for.
pub const A2A_CLIENT_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// Slack the A2A client waits beyond `timeoutMs` for the network and the agent.
pub const A2A_CLIENT_SLACK: std::time::Duration = std::time::Duration::from_secs(5);
/// Quiet time after which an A2A event stream sends a keep-alive comment.
pub const A2A_SSE_KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(15);
/// Longest time one write to an A2A event stream may block.
pub const A2A_SSE_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest pause between a blocking A2A send's looks at its ask (they double from the first).
pub const A2A_POLL: std::time::Duration = std::time::Duration::from_millis(25);
/// First pause of those looks (most answers come quickly; jobs have no wake-up).
pub const A2A_POLL_FIRST: std::time::Duration = std::time::Duration::from_millis(1);
/// Owner-page event streams open at once (each holds a connection and a per-address slot).
pub const OWNER_PAGE_STREAMS_MAX: usize = 2;
/// How long one owner-page event stream lasts; the browser then reconnects by itself.
pub const OWNER_PAGE_STREAM_DURATION: std::time::Duration = std::time::Duration::from_secs(300);
/// How often an idle owner-page stream sends a comment line, so a dead browser is noticed.
pub const OWNER_PAGE_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(15);
/// How often an owner-page stream looks for changes in the pending lists.
pub const OWNER_PAGE_POLL: std::time::Duration = std::time::Duration::from_millis(250);
/// How long one owner-page response or event write may take.
pub const OWNER_PAGE_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Characters of the question an ask notice shows.
pub const ASK_NOTIFY_PREVIEW_CHARS: usize = 80;
/// Characters of the ask id an ask notice shows as its short name.
pub const ASK_NOTIFY_SHORT_ID_CHARS: usize = 8;
/// Notification sinks one ask server keeps.
pub const ASK_NOTIFY_SINKS_MAX: usize = 8;
/// Slack an ask client waits beyond `timeoutMs` for the network and the server.
pub const ASK_CLIENT_SLACK: std::time::Duration = std::time::Duration::from_secs(5);
/// Timeout of one `/ask/status` poll.
pub const ASK_STATUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// Longest line on the owner's approval control socket.
pub const APPROVAL_LINE_BYTES_MAX: u64 = 4 * 1024;
/// How long one approval control exchange may take.
pub const APPROVAL_IO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// How often the approval control loop looks at its stop flag.
pub const APPROVAL_POLL_MS: u16 = 200;
/// Ask server state files the CLI reads.
pub const APPROVAL_RUN_FILES_MAX: usize = 64;
/// Largest server state file the CLI reads.
pub const APPROVAL_RUN_FILE_BYTES_MAX: u64 = 1 << 20;
/// Question characters kept in the owner's file (the full question reaches the answerer).
pub const APPROVAL_QUESTION_SHOWN_CHARS: usize = 2_000;
