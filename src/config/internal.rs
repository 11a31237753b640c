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
