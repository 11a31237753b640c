//! How a CLI command reaches "its" root: inside `peer host -- CMD` through the trusted local
//! channel named by `PEER_CONTROL` (acting as the run in `PEER_RUN_ID`, if any); with `--as
//! ALIAS` as a short-lived root of its own in this process. Both paths run the same local
//! methods.

use super::Ctx;
use crate::config::Limits;
use crate::error::{Code, Error, Result};
use crate::protocol::local::{LocalCall, LocalRequest, LocalTool};
use crate::runtime::control::{self, ControlFile};
use crate::runtime::handler;
use crate::runtime::{Root, RootOptions};
use crate::transport::LocalClient;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::sync::Arc;

use crate::config::internal::ANSWER_MARGIN_MS;

pub enum Session {
    Remote {
        client: Box<LocalClient>,
        control: ControlFile,
        run_id: Option<String>,
        auto: Option<String>,
        limits: Limits,
    },
    InProcess {
        root: Arc<Root>,
        limits: Limits,
    },
}

impl Session {
    /// The enclosing session, or a short-lived root for `--as`, or a usage error.
    pub fn open(ctx: &Ctx) -> Result<Session> {
        if let Some(alias) = &ctx.as_alias {
            crate::identity::validate_alias(alias)?;
            let stop = ctx.stop()?;
            let root = Root::start(&RootOptions {
                home: ctx.home.clone(),
                alias: Some(alias.clone()),
                session_id: Some(crate::runtime::one_off_session(alias)),
                mode: "command",
                one_off: true,
                purpose: Some("peer --as".into()),
                ..Default::default()
            })?;
            let limits = root.core.limits().clone();
            // A stop signal wakes every wait of this short-lived root, so the command returns
            // and closes it normally: its record, socket and control file are removed.
            let core = root.core.clone();
            stop.on_stop(move || {
                core.stopping
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                core.store.wake_waiters();
            })?;
            return Ok(Session::InProcess {
                root: Arc::new(root),
                limits,
            });
        }
        match control::from_env()? {
            Some(cf) => Session::connect(cf),
            None => Err(Error::new(
                Code::Usage,
                "not inside a peer session: run this inside 'peer host -- CMD', or pass --as ALIAS for a one-off root",
            )),
        }
    }

    fn connect(cf: ControlFile) -> Result<Session> {
        // This process now holds the root's (or a run's) secret.
        crate::hardening::no_core_dumps()?;
        let mut limits = Limits::default();
        let mut client = Box::new(LocalClient::connect(
            &cf.endpoint,
            cf.secret_bytes()?,
            &limits,
        )?);
        // A run's own control file names its run (the root enforces it); otherwise the
        // variable names which of the root's runs this command acts as.
        let run_id = cf.run_id.clone().or_else(|| {
            std::env::var(control::ENV_RUN)
                .ok()
                .filter(|s| !s.is_empty())
        });
        let auto = std::env::var(crate::runtime::auto::ENV_AUTO)
            .ok()
            .filter(|s| !s.is_empty());
        let info_req = LocalRequest {
            run_id: run_id.clone(),
            auto: None,
            call: LocalCall::Info,
        };
        let info: Value = client.call(&info_req, limits.acknowledgement_ms.max(5_000))?;
        if let Some(l) = info.get("limits") {
            let get = |k: &str, d: u64| l.get(k).and_then(Value::as_u64).unwrap_or(d);
            limits.message_bytes = get("messageBytes", limits.message_bytes);
            limits.wait_ms_max = get("waitMsMax", limits.wait_ms_max);
            limits.acknowledgement_ms = get("acknowledgementMs", limits.acknowledgement_ms);
            limits.frame_bytes = get("frameBytes", limits.frame_bytes);
            client.set_frame_bytes(limits.frame_bytes);
        }
        Ok(Session::Remote {
            client,
            control: cf,
            run_id,
            auto,
            limits,
        })
    }

    pub fn limits(&self) -> &Limits {
        match self {
            Session::Remote { limits, .. } | Session::InProcess { limits, .. } => limits,
        }
    }

    /// Calls one local method; `timeout_ms` 0 means "the root's own bounds plus a margin".
    pub fn call(&mut self, call: LocalCall, timeout_ms: u64) -> Result<Value> {
        match self {
            Session::Remote {
                client,
                run_id,
                auto,
                limits,
                ..
            } => {
                let wait = match &call {
                    LocalCall::Tool(t) => t.args.get("waitMs").and_then(Value::as_u64),
                    _ => None,
                };
                let timeout = if timeout_ms == 0 {
                    wait.unwrap_or(0) + limits.acknowledgement_ms * 8 + ANSWER_MARGIN_MS
                } else {
                    timeout_ms
                };
                let req = LocalRequest {
                    run_id: run_id.clone(),
                    auto: auto.clone(),
                    call,
                };
                client.call(&req, timeout)
            }
            Session::InProcess { root, .. } => {
                let answer = handler::local_request(&root.core, None, LocalRequest::root(call))?;
                serde_json::to_value(answer).map_err(|e| Error::new(Code::Io, e.to_string()))
            }
        }
    }

    /// [`Session::call`], its answer read as the type the root wrote it from.
    pub fn call_as<T: DeserializeOwned>(&mut self, call: LocalCall, timeout_ms: u64) -> Result<T> {
        let answer = self.call(call, timeout_ms)?;
        super::decode(&answer)
    }

    /// Runs one model tool with its arguments and CLI-only envelope fields.
    pub fn tool(&mut self, t: LocalTool) -> Result<Value> {
        self.call(LocalCall::Tool(t), 0)
    }

    /// A second session to the same root (for a watcher thread).
    pub fn fork(&self) -> Result<Session> {
        match self {
            Session::Remote {
                control,
                run_id,
                auto,
                limits,
                ..
            } => {
                let client = Box::new(LocalClient::connect(
                    &control.endpoint,
                    control.secret_bytes()?,
                    limits,
                )?);
                Ok(Session::Remote {
                    client,
                    control: control.clone(),
                    run_id: run_id.clone(),
                    auto: auto.clone(),
                    limits: limits.clone(),
                })
            }
            Session::InProcess { root, limits } => Ok(Session::InProcess {
                root: root.clone(),
                limits: limits.clone(),
            }),
        }
    }

    /// Ends the session; a short-lived root waits briefly for its receipts to be pushed, then
    /// shuts down and removes its files.
    pub fn close(self) {
        if let Session::InProcess { root, .. } = self
            && let Ok(root) = Arc::try_unwrap(root)
        {
            root.shutdown();
        }
    }
}
