//! Whether control viewers' input reaches a sandbox's desktop: closed while a run's agent
//! drives it, open otherwise (and when a person takes over).
//!
//! Each process keeps a gate per sandbox that its open control sessions follow at once (a
//! `watch`), and writes every change to the database (`sandboxes.control_open`, with the time
//! of the change in `control_seq`): a viewer connected through another replica follows the
//! replica that drives the run, whose changes the session sweeper there applies every second
//! ([`ControlGates::apply_stored`]) and a new session starts from.
//!
//! **Fails closed.** A stored value replaces this process's only when it is newer (so a row
//! read before a change was written cannot undo it), and never while a change of this process
//! is still unwritten (a write that keeps failing leaves this process's value in force). An
//! opening by a run's driver is written only while no other driver's agent drives the sandbox
//! (a stalled driver that lost its run cannot reopen the gate over its successor's), and when
//! the database keeps another value, this process takes it.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::db::Store;

struct Gate {
    open: watch::Sender<bool>,
    /// When the value held was set (ms), here or by the replica whose value was applied.
    seq: i64,
    /// The run lease holder that set it here, if a run did.
    driver: Option<String>,
    /// Changes made here and not yet written to the database.
    unwritten: usize,
}

impl Gate {
    fn new(open: bool, seq: i64) -> Self {
        Self {
            open: watch::channel(open).0,
            seq,
            driver: None,
            unwritten: 0,
        }
    }
}

/// How many times a change is tried before this process keeps it to itself.
const WRITE_TRIES: u32 = 5;

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

    /// The gate a control session follows. `stored` and `seq`: the value in the sandbox's row
    /// as just read, which a gate made now starts from (and an existing one takes when newer).
    pub fn subscribe(&self, sandbox_id: &str, stored: bool, seq: i64) -> watch::Receiver<bool> {
        self.apply_stored(sandbox_id, stored, seq);
        match self.gates.lock() {
            Ok(mut gates) => gates
                .entry(sandbox_id.to_string())
                .or_insert_with(|| Gate::new(stored, seq))
                .open
                .subscribe(),
            // A poisoned lock: fail closed.
            Err(_) => watch::channel(false).1,
        }
    }

    /// Opens or closes a sandbox's gate (`driver`: the run lease holder doing it): this
    /// process's sessions follow at once, the database (and through it the other replicas'
    /// sessions) a moment later.
    pub fn set(
        self: &Arc<Self>,
        store: &Store,
        sandbox_id: &str,
        open: bool,
        driver: Option<&str>,
    ) {
        let Ok(mut gates) = self.gates.lock() else {
            return;
        };
        let gate = gates
            .entry(sandbox_id.to_string())
            .or_insert_with(|| Gate::new(open, 0));
        gate.open.send_replace(open);
        gate.seq = crate::secret::now_ms().max(gate.seq + 1);
        gate.driver = driver.map(str::to_owned);
        gate.unwritten += 1;
        drop(gates);
        let this = self.clone();
        let store = store.clone();
        let id = sandbox_id.to_string();
        tokio::spawn(async move { this.write(&store, &id).await });
    }

    /// Writes the gate's value as it is now; takes the database's when that holds another.
    async fn write(&self, store: &Store, id: &str) {
        let _turn = self.writes.lock().await;
        for attempt in 1..=WRITE_TRIES {
            let now = self.gates.lock().ok().and_then(|g| {
                g.get(id)
                    .map(|gate| (*gate.open.borrow(), gate.seq, gate.driver.clone()))
            });
            let Some((open, seq, driver)) = now else {
                return;
            };
            match store
                .write_control_gate(id, open, seq, driver.as_deref())
                .await
            {
                Ok(stored) => {
                    if let Ok(mut gates) = self.gates.lock()
                        && let Some(gate) = gates.get_mut(id)
                    {
                        gate.unwritten = gate.unwritten.saturating_sub(1);
                        if let Some((stored_open, stored_seq)) = stored
                            && (stored_open, stored_seq) != (open, seq)
                        {
                            // Refused (another driver's agent drives it) or overtaken.
                            tracing::info!(sandbox_id = %id, open = stored_open, "the control gate follows the database");
                            gate.open.send_replace(stored_open);
                            gate.seq = stored_seq;
                        }
                    }
                    return;
                }
                Err(error) => {
                    tracing::warn!(sandbox_id = %id, %error, attempt, "writing the control gate failed");
                    tokio::time::sleep(Duration::from_millis(200) * attempt).await;
                }
            }
        }
        // Left unwritten: this process's value stays in force here.
    }

    /// Applies the value the database holds (another replica's change, at `seq`) when it is
    /// newer than this process's and no change of this process is still being written.
    pub fn apply_stored(&self, sandbox_id: &str, open: bool, seq: i64) {
        if let Ok(mut gates) = self.gates.lock()
            && let Some(gate) = gates.get_mut(sandbox_id)
            && gate.unwritten == 0
            && seq > gate.seq
        {
            gate.seq = seq;
            gate.open.send_if_modified(|now| {
                let changed = *now != open;
                *now = open;
                changed
            });
        }
    }

    /// Keeps only the gates of `live` sandboxes (those removed by another replica go).
    pub fn retain(&self, live: &HashSet<String>) {
        if let Ok(mut gates) = self.gates.lock() {
            gates.retain(|id, gate| live.contains(id) || gate.unwritten > 0);
        }
    }

    /// Drops a removed sandbox's gate.
    pub fn forget(&self, sandbox_id: &str) {
        if let Ok(mut gates) = self.gates.lock() {
            gates.remove(sandbox_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_value_replaces_only_an_older_one() {
        let gates = ControlGates::new();
        let gate = gates.subscribe("sbx", true, 10);
        gates.apply_stored("sbx", false, 5);
        assert!(*gate.borrow(), "older: ignored");
        gates.apply_stored("sbx", false, 11);
        assert!(!*gate.borrow(), "newer: applied");
        // A later session starts from the newest of what it read and what is here.
        let later = gates.subscribe("sbx", true, 7);
        assert!(!*later.borrow());
        gates.retain(&HashSet::new());
        assert!(gates.gates.lock().unwrap().is_empty());
    }
}
