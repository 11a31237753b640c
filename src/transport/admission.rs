//! Who gets a connection thread: the endpoint's admission bookkeeping, pure and unit-tested.
//! Connections that have not finished the handshake share a small budget of their own
//! (`inboundConnections / 4`, at least 8); when it is full the oldest of them is cut, so a
//! burst of idle connections can delay a legitimate client by at most one handshake round and
//! never locks it out. Authenticated connections share `inboundConnections`, of which the
//! last eighth (at least 1) is reserved for the root's own local adapters (its CLI, MCP and
//! children), so peers cannot take every slot from the session's own `peer inbox`.

use std::collections::{HashMap, VecDeque};

/// Which side of the local/peer split an authenticated connection is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    Local,
    Peer,
}

/// Counts for one endpoint.
#[derive(Debug)]
pub struct Admission {
    unauthenticated_max: usize,
    authenticated_max: usize,
    local_reserved: usize,
    /// Connections still in the handshake, oldest first.
    pending: VecDeque<u64>,
    authenticated: HashMap<u64, Class>,
}

impl Admission {
    pub fn new(inbound_connections: u64) -> Admission {
        let total = usize::try_from(inbound_connections.max(1)).unwrap_or(usize::MAX);
        Admission {
            unauthenticated_max: (total / 4).max(8),
            authenticated_max: total,
            local_reserved: (total / 8).max(1).min(total),
            pending: VecDeque::new(),
            authenticated: HashMap::new(),
        }
    }

    /// The most connection threads this bookkeeping lets exist at once.
    pub fn threads_max(&self) -> usize {
        self.unauthenticated_max + self.authenticated_max
    }

    /// A new connection starts its handshake; returns the oldest unauthenticated connection
    /// to cut when the unauthenticated budget was full.
    pub fn arrive(&mut self, id: u64) -> Option<u64> {
        let evicted = if self.pending.len() >= self.unauthenticated_max {
            self.pending.pop_front()
        } else {
            None
        };
        self.pending.push_back(id);
        evicted
    }

    /// The handshake of `id` succeeded; false when no authenticated slot is free for its
    /// class (the connection is then answered QUEUE_FULL and closed).
    pub fn authenticate(&mut self, id: u64, class: Class) -> bool {
        self.pending.retain(|p| *p != id);
        let used = self.authenticated.len();
        let room = match class {
            Class::Local => self.authenticated_max,
            Class::Peer => self.authenticated_max - self.local_reserved,
        };
        if used >= room {
            return false;
        }
        self.authenticated.insert(id, class);
        true
    }

    /// Connection `id` ended, in whatever state.
    pub fn leave(&mut self, id: u64) {
        self.pending.retain(|p| *p != id);
        self.authenticated.remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_unauthenticated_connections_never_lock_out_a_local_adapter() {
        let mut a = Admission::new(64);
        let mut evicted = Vec::new();
        for id in 0..80 {
            evicted.extend(a.arrive(id));
        }
        assert_eq!(a.pending.len(), 16);
        assert_eq!(
            evicted,
            (0..64).collect::<Vec<_>>(),
            "the oldest are cut first"
        );
        assert_eq!(a.arrive(1000), Some(64));
        assert!(a.authenticate(1000, Class::Local));
        assert_eq!(a.pending.len(), 15);
        assert!(a.threads_max() >= 16 + 64);
    }

    #[test]
    fn peers_cannot_take_the_local_reserve() {
        let mut a = Admission::new(16);
        for id in 0..14 {
            assert_eq!(a.arrive(id), None);
            assert!(a.authenticate(id, Class::Peer), "peer {id}");
        }
        a.arrive(100);
        assert!(
            !a.authenticate(100, Class::Peer),
            "the reserve is the locals'"
        );
        a.arrive(101);
        assert!(a.authenticate(101, Class::Local));
        a.arrive(102);
        assert!(a.authenticate(102, Class::Local));
        a.arrive(103);
        assert!(!a.authenticate(103, Class::Local), "the total still binds");
        a.leave(0);
        a.arrive(104);
        assert!(
            !a.authenticate(104, Class::Peer),
            "15 of 16 used: 2 reserved"
        );
        assert!(a.authenticate(105, Class::Local));
    }
}
