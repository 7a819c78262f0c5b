//! Whether control viewers' input reaches a sandbox's desktop: closed while a run's agent
//! drives it, open otherwise (and when a person takes over).
//!
//! Each process keeps a gate per sandbox that its open control sessions follow at once (a
//! `watch`), and writes every change to the database (`sandboxes.control_open`): a viewer
//! connected through another replica follows the replica that drives the run, whose changes
//! the session sweeper there applies every second ([`ControlGates::apply_stored`]). A stored
//! value never overrides a change of this process that is not written yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::db::Store;

struct Gate {
    open: watch::Sender<bool>,
    /// Changes made here and not yet written to the database.
    unwritten: usize,
}

/// The control gates of this process's sandboxes.
#[derive(Default)]
pub struct ControlGates {
    gates: Mutex<HashMap<String, Gate>>,
    /// Writes take turns, each writing the gate's value as it is then: the last write leaves
    /// the latest value, whatever order the writes started in.
    writes: tokio::sync::Mutex<()>,
}

impl ControlGates {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// The gate a control session follows. `stored`: the value in the sandbox's row as just
    /// read, which a gate made now starts from (and an existing one takes, unless a change of
    /// this process is still being written).
    pub fn subscribe(&self, sandbox_id: &str, stored: bool) -> watch::Receiver<bool> {
        self.apply_stored(sandbox_id, stored);
        match self.gates.lock() {
            Ok(mut gates) => gates
                .entry(sandbox_id.to_string())
                .or_insert_with(|| Gate {
                    open: watch::channel(stored).0,
                    unwritten: 0,
                })
                .open
                .subscribe(),
            // A poisoned lock: fail closed.
            Err(_) => watch::channel(false).1,
        }
    }

    /// Opens or closes a sandbox's gate: this process's sessions follow at once, the database
    /// (and through it the other replicas' sessions) a moment later.
    pub fn set(self: &Arc<Self>, store: &Store, sandbox_id: &str, open: bool) {
        let Ok(mut gates) = self.gates.lock() else {
            return;
        };
        let gate = gates.entry(sandbox_id.to_string()).or_insert_with(|| Gate {
            open: watch::channel(open).0,
            unwritten: 0,
        });
        gate.open.send_replace(open);
        gate.unwritten += 1;
        drop(gates);
        let this = self.clone();
        let store = store.clone();
        let id = sandbox_id.to_string();
        tokio::spawn(async move {
            let _turn = this.writes.lock().await;
            let now = this
                .gates
                .lock()
                .ok()
                .and_then(|g| g.get(&id).map(|gate| *gate.open.borrow()));
            let written = match now {
                Some(open) => store.set_control_open(&id, open).await,
                None => Ok(()),
            };
            if let Err(error) = written {
                tracing::warn!(sandbox_id = %id, %error, "writing the control gate failed");
            }
            if let Ok(mut gates) = this.gates.lock()
                && let Some(gate) = gates.get_mut(&id)
            {
                gate.unwritten = gate.unwritten.saturating_sub(1);
            }
        });
    }

    /// The sandboxes with a gate here.
    pub fn sandboxes(&self) -> Vec<String> {
        self.gates
            .lock()
            .map(|g| g.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Applies the value the database holds (another replica's change) unless a change of
    /// this process is still being written.
    pub fn apply_stored(&self, sandbox_id: &str, open: bool) {
        if let Ok(gates) = self.gates.lock()
            && let Some(gate) = gates.get(sandbox_id)
            && gate.unwritten == 0
        {
            gate.open.send_if_modified(|now| {
                let changed = *now != open;
                *now = open;
                changed
            });
        }
    }

    /// Drops a removed sandbox's gate.
    pub fn forget(&self, sandbox_id: &str) {
        if let Ok(mut gates) = self.gates.lock() {
            gates.remove(sandbox_id);
        }
    }
}
