//! A container platform and its sandboxds, in memory.
//!
//! [`FakePlatform`] keeps the [`Backend`] contract the Docker backend keeps: containers carry
//! an instance label and only this instance's are listed, inspected or removed (removing
//! another's fails); a failed start leaves nothing behind; removing a missing container is not
//! an error. Each container's sandboxd answers at the container's address, only while the
//! container runs, and only to the key the container was given.
//!
//! A test steers it per [`Step`]: [`fail_next`](FakePlatform::fail_next) makes the next call
//! fail, [`hold_next`](FakePlatform::hold_next) stops the next call at a point the test waits
//! for ([`Held::reached`]) until it lets it go on or fail. A held start has already created and
//! started its container (the worst moment for a client to go away); a held removal has not
//! removed anything yet.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use reqwest::StatusCode;
use sandbox_client::ClientError;
use tokio::sync::oneshot;

use crate::backend::{Backend, BackendError, ContainerInfo, ContainerSpec, Started};
use crate::sandboxes::sandboxd::{ActivityReport, HomeArchiveRequest, SandboxProbe};

/// A call a test can make fail or hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Step {
    Start,
    Remove,
    Inspect,
    List,
    LogsTail,
    /// sandboxd's `/readyz`.
    Ready,
    /// sandboxd's `/v1/activity` (the heartbeat).
    Activity,
    Pause,
    Resume,
    /// sandboxd's `/v1/sandbox/home/archive`.
    Archive,
}

/// One container as the fake platform holds it.
#[derive(Debug, Clone)]
pub(crate) struct FakeContainer {
    pub(crate) container_id: String,
    pub(crate) sandbox_id: Option<String>,
    pub(crate) instance: String,
    pub(crate) running: bool,
    /// Frozen: its sandboxd answers nothing until resumed.
    pub(crate) paused: bool,
    pub(crate) address: String,
    /// The key its sandboxd accepts.
    pub(crate) api_key: String,
    /// What its sandboxd reports as not ready (`name (state)`); empty: ready.
    pub(crate) not_ready: Vec<String>,
    /// Work in flight its sandboxd reports in the heartbeat.
    pub(crate) in_flight: usize,
    /// Its home, as the bytes its archive route answers (set from the home archive it was
    /// started with).
    pub(crate) home: Vec<u8>,
    /// Its browser profile, as the bytes its archive route answers for a folder (set from the
    /// profile archive it was started with).
    pub(crate) profile: Vec<u8>,
    /// Held after an archive with `keep_held` (not released yet).
    pub(crate) held: bool,
}

/// How a held step goes on.
enum Release {
    Continue,
    Fail(String),
}

struct HoldPoint {
    reached: oneshot::Sender<()>,
    release: oneshot::Receiver<Release>,
}

/// A step stopped by [`FakePlatform::hold_next`]. Dropping it lets the step go on.
pub(crate) struct Held {
    reached: Option<oneshot::Receiver<()>>,
    release: oneshot::Sender<Release>,
}

impl Held {
    /// Waits until the held step is reached.
    pub(crate) async fn reached(&mut self) {
        if let Some(reached) = self.reached.take() {
            reached
                .await
                .expect("the platform dropped a hold point without reaching it");
        }
    }

    /// Lets the step go on.
    pub(crate) fn release(self) {
        let _ = self.release.send(Release::Continue);
    }

    /// Makes the step fail with `message`.
    pub(crate) fn fail(self, message: &str) {
        let _ = self.release.send(Release::Fail(message.to_string()));
    }
}

#[derive(Default)]
struct State {
    next: u64,
    containers: BTreeMap<String, FakeContainer>,
    failures: HashMap<Step, VecDeque<String>>,
    holds: HashMap<Step, VecDeque<HoldPoint>>,
    calls: HashMap<Step, usize>,
    /// Every container a `remove` call actually removed, in order.
    removed: Vec<String>,
    /// What a new container's sandboxd reports as not ready at first.
    boot_not_ready: Vec<String>,
}

/// The fake container platform (see the module documentation).
pub(crate) struct FakePlatform {
    instance: String,
    state: Mutex<State>,
}

impl FakePlatform {
    /// A platform for the orchestrator instance `instance`.
    pub(crate) fn new(instance: &str) -> Self {
        Self {
            instance: instance.to_string(),
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A test that panicked while holding the lock has failed already.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next call of `step` fails with `message`.
    pub(crate) fn fail_next(&self, step: Step, message: &str) {
        self.state()
            .failures
            .entry(step)
            .or_default()
            .push_back(message.to_string());
    }

    /// Forgets the failures asked for that no call has met yet.
    pub(crate) fn clear_failures(&self) {
        self.state().failures.clear();
    }

    /// The next call of `step` stops until the returned handle lets it go on.
    pub(crate) fn hold_next(&self, step: Step) -> Held {
        let (reached_tx, reached_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        self.state()
            .holds
            .entry(step)
            .or_default()
            .push_back(HoldPoint {
                reached: reached_tx,
                release: release_rx,
            });
        Held {
            reached: Some(reached_rx),
            release: release_tx,
        }
    }

    /// New containers' sandboxds report these programs as not ready (until told otherwise
    /// with [`set_not_ready`](Self::set_not_ready)); empty: ready at once.
    pub(crate) fn boot_not_ready(&self, programs: &[&str]) {
        self.state().boot_not_ready = programs.iter().map(|p| p.to_string()).collect();
    }

    /// What the sandboxd of a sandbox's container reports as not ready from now on.
    pub(crate) fn set_not_ready(&self, sandbox_id: &str, programs: &[&str]) {
        self.update(sandbox_id, |c| {
            c.not_ready = programs.iter().map(|p| p.to_string()).collect();
        });
    }

    /// Work in flight the sandboxd of a sandbox's container reports.
    pub(crate) fn set_in_flight(&self, sandbox_id: &str, in_flight: usize) {
        self.update(sandbox_id, |c| c.in_flight = in_flight);
    }

    /// The container of a sandbox stops (and stays, like a container without `auto_remove`).
    pub(crate) fn kill(&self, sandbox_id: &str) {
        self.update(sandbox_id, |c| c.running = false);
    }

    /// The container of a sandbox is frozen or thawed behind the lifecycle's back (someone ran
    /// `docker pause`, or a pause was made and its record lost).
    pub(crate) fn set_paused(&self, sandbox_id: &str, paused: bool) {
        self.update(sandbox_id, |c| c.paused = paused);
    }

    /// The container of a sandbox disappears (it exited and `auto_remove` deleted it, or
    /// someone removed it by hand).
    pub(crate) fn vanish(&self, sandbox_id: &str) {
        self.state()
            .containers
            .retain(|_, c| c.sandbox_id.as_deref() != Some(sandbox_id));
    }

    fn update(&self, sandbox_id: &str, change: impl Fn(&mut FakeContainer)) {
        let mut state = self.state();
        let mut found = false;
        for container in state.containers.values_mut() {
            if container.sandbox_id.as_deref() == Some(sandbox_id) {
                change(container);
                found = true;
            }
        }
        assert!(found, "no container of sandbox {sandbox_id}");
    }

    /// Adds a running container as if created outside this process (by an earlier run of this
    /// instance, or by another instance); returns its id.
    pub(crate) fn add_container(&self, instance: &str, sandbox_id: Option<&str>) -> String {
        let mut state = self.state();
        let container = Self::new_container(&mut state, instance, sandbox_id, "");
        let id = container.container_id.clone();
        state.containers.insert(id.clone(), container);
        id
    }

    fn new_container(
        state: &mut State,
        instance: &str,
        sandbox_id: Option<&str>,
        api_key: &str,
    ) -> FakeContainer {
        state.next += 1;
        let n = state.next;
        FakeContainer {
            container_id: format!("ctr-{n:04}"),
            sandbox_id: sandbox_id.map(str::to_owned),
            instance: instance.to_string(),
            running: true,
            paused: false,
            address: format!("10.88.{}.{}", n / 250, n % 250 + 2),
            api_key: api_key.to_string(),
            not_ready: state.boot_not_ready.clone(),
            in_flight: 0,
            home: Vec::new(),
            profile: Vec::new(),
            held: false,
        }
    }

    /// What a sandbox's home holds (the bytes its archive route answers).
    pub(crate) fn set_home(&self, sandbox_id: &str, home: &[u8]) {
        self.update(sandbox_id, |c| c.home = home.to_vec());
    }

    /// What a sandbox's browser profile holds (the bytes its archive route answers for a
    /// folder).
    pub(crate) fn set_profile(&self, sandbox_id: &str, profile: &[u8]) {
        self.update(sandbox_id, |c| c.profile = profile.to_vec());
    }

    /// Marks the container at `address` held or released; whether it was held.
    fn set_held(&self, address: &str, held: bool) -> bool {
        let mut state = self.state();
        match state
            .containers
            .values_mut()
            .find(|c| c.address == address && c.running)
        {
            Some(c) => std::mem::replace(&mut c.held, held),
            None => false,
        }
    }

    /// Every container, of every instance.
    pub(crate) fn containers(&self) -> Vec<FakeContainer> {
        self.state().containers.values().cloned().collect()
    }

    /// The container of a sandbox, if any.
    pub(crate) fn container_of(&self, sandbox_id: &str) -> Option<FakeContainer> {
        self.state()
            .containers
            .values()
            .find(|c| c.sandbox_id.as_deref() == Some(sandbox_id))
            .cloned()
    }

    /// How many times `step` was called.
    pub(crate) fn calls(&self, step: Step) -> usize {
        self.state().calls.get(&step).copied().unwrap_or(0)
    }

    /// The containers `remove` actually removed, in order.
    pub(crate) fn removed(&self) -> Vec<String> {
        self.state().removed.clone()
    }

    /// Counts the call, then fails it or holds it if the test asked to.
    async fn step(&self, step: Step) -> Result<(), String> {
        let (failure, hold) = {
            let mut state = self.state();
            *state.calls.entry(step).or_default() += 1;
            let failure = state.failures.get_mut(&step).and_then(VecDeque::pop_front);
            let hold = match failure {
                Some(_) => None,
                None => state.holds.get_mut(&step).and_then(VecDeque::pop_front),
            };
            (failure, hold)
        };
        if let Some(message) = failure {
            return Err(message);
        }
        if let Some(hold) = hold {
            let _ = hold.reached.send(());
            if let Ok(Release::Fail(message)) = hold.release.await {
                return Err(message);
            }
        }
        Ok(())
    }

    fn info(container: &FakeContainer) -> ContainerInfo {
        ContainerInfo {
            container_id: container.container_id.clone(),
            sandbox_id: container.sandbox_id.clone(),
            running: container.running,
            paused: container.paused,
            address: container.running.then(|| container.address.clone()),
        }
    }

    /// Pauses (`frozen`) or resumes one of this instance's running containers.
    async fn freeze(
        &self,
        step: Step,
        container_id: &str,
        frozen: bool,
    ) -> Result<(), BackendError> {
        let what = if frozen {
            "pausing the container"
        } else {
            "resuming the container"
        };
        self.step(step).await.map_err(|m| failed(what, m))?;
        let mut state = self.state();
        match state.containers.get_mut(container_id) {
            Some(c) if c.instance == self.instance && c.running => {
                c.paused = frozen;
                Ok(())
            }
            Some(c) if c.instance == self.instance => Err(failed(
                what,
                format!("container {container_id} is not running"),
            )),
            _ => Err(failed(
                what,
                format!("container {container_id} is not one of this orchestrator's containers"),
            )),
        }
    }

    /// The running container of ours at `address` that accepts `key`: `Err` when nothing
    /// answers there, `Ok(None)` when sandboxd refuses the key.
    fn sandboxd_at(
        &self,
        operation: &'static str,
        address: &str,
        key: &str,
    ) -> Result<Option<FakeContainer>, ClientError> {
        let state = self.state();
        let container = state
            .containers
            .values()
            .find(|c| c.address == address && c.running && !c.paused)
            .ok_or_else(|| no_answer(operation, address))?;
        Ok((container.api_key == key).then(|| container.clone()))
    }
}

/// What a call with a key the sandboxd there does not accept gets.
fn wrong_key(operation: &'static str) -> ClientError {
    ClientError::Status {
        operation,
        status: StatusCode::UNAUTHORIZED,
        message: "wrong key".into(),
        loc: None,
    }
}

/// What a call to an address where nothing answers gets. (A refused connection cannot be made
/// without a socket; a proxy's 502 is the nearest error, and the lifecycle treats both alike.)
fn no_answer(operation: &'static str, address: &str) -> ClientError {
    ClientError::Status {
        operation,
        status: StatusCode::BAD_GATEWAY,
        message: format!("nothing answers at {address}"),
        loc: None,
    }
}

fn failed(step: &'static str, message: String) -> BackendError {
    BackendError::Failed { step, message }
}

#[async_trait::async_trait]
impl Backend for FakePlatform {
    async fn prepare(&self) -> Result<(), BackendError> {
        Ok(())
    }

    async fn start(&self, spec: &ContainerSpec) -> Result<Started, BackendError> {
        let home = match &spec.home_archive {
            Some(path) => std::fs::read(path)
                .map_err(|e| failed("reading the home archive", e.to_string()))?,
            None => Vec::new(),
        };
        let profile = match &spec.profile_archive {
            Some(path) => std::fs::read(path)
                .map_err(|e| failed("reading the profile archive", e.to_string()))?,
            None => Vec::new(),
        };
        let container = {
            let mut state = self.state();
            let mut container = Self::new_container(
                &mut state,
                &self.instance,
                Some(&spec.sandbox_id),
                &spec.api_key,
            );
            container.home = home;
            container.profile = profile;
            state
                .containers
                .insert(container.container_id.clone(), container.clone());
            container
        };
        if let Err(message) = self.step(Step::Start).await {
            // Like the Docker backend: a failed start leaves nothing behind.
            self.state().containers.remove(&container.container_id);
            return Err(failed("starting the container", message));
        }
        Ok(Started {
            container_id: container.container_id,
            address: container.address,
        })
    }

    async fn remove(&self, container_id: &str) -> Result<(), BackendError> {
        self.step(Step::Remove)
            .await
            .map_err(|m| failed("removing the container", m))?;
        let mut state = self.state();
        let owner = state
            .containers
            .get(container_id)
            .map(|c| c.instance.clone());
        match owner {
            None => Ok(()),
            Some(owner) if owner != self.instance => Err(failed(
                "removing the container",
                format!("container {container_id} is not this orchestrator's; it is left alone"),
            )),
            Some(_) => {
                state.containers.remove(container_id);
                state.removed.push(container_id.to_string());
                Ok(())
            }
        }
    }

    async fn pause(&self, container_id: &str) -> Result<(), BackendError> {
        self.freeze(Step::Pause, container_id, true).await
    }

    async fn resume(&self, container_id: &str) -> Result<(), BackendError> {
        self.freeze(Step::Resume, container_id, false).await
    }

    async fn list(&self) -> Result<Vec<ContainerInfo>, BackendError> {
        self.step(Step::List)
            .await
            .map_err(BackendError::Unavailable)?;
        Ok(self
            .state()
            .containers
            .values()
            .filter(|c| c.instance == self.instance)
            .map(Self::info)
            .collect())
    }

    /// One machine, like the Docker backend's engine: 2 CPUs, 4 GiB, nothing reserved.
    async fn nodes(&self) -> Result<Vec<crate::backend::NodeInfo>, BackendError> {
        let containers = self
            .state()
            .containers
            .values()
            .filter(|c| c.instance == self.instance)
            .map(Self::info)
            .filter(|c| c.running)
            .map(|c| c.container_id)
            .collect();
        Ok(vec![crate::backend::NodeInfo {
            id: "fake-node".to_string(),
            name: "fake".to_string(),
            role: "engine".to_string(),
            state: "ready".to_string(),
            availability: "active".to_string(),
            nano_cpus: 2_000_000_000,
            memory_bytes: 4 << 30,
            containers,
            ..Default::default()
        }])
    }

    async fn inspect(&self, container_id: &str) -> Result<Option<ContainerInfo>, BackendError> {
        self.step(Step::Inspect)
            .await
            .map_err(BackendError::Unavailable)?;
        Ok(self
            .state()
            .containers
            .get(container_id)
            .filter(|c| c.instance == self.instance)
            .map(Self::info))
    }

    async fn logs_tail(&self, container_id: &str, _lines: usize) -> Result<String, BackendError> {
        self.step(Step::LogsTail)
            .await
            .map_err(|m| failed("reading the logs", m))?;
        let state = self.state();
        match state.containers.get(container_id) {
            Some(c) if c.instance == self.instance => {
                Ok(format!("the last lines of {container_id}"))
            }
            _ => Err(failed(
                "reading the logs",
                format!("no such container: {container_id}"),
            )),
        }
    }
}

#[async_trait::async_trait]
impl SandboxProbe for FakePlatform {
    async fn ready(&self, address: &str, key: &str) -> Result<bool, ClientError> {
        self.step(Step::Ready)
            .await
            .map_err(|_| no_answer("readyz", address))?;
        // A refused key is an answer, and not "ready" (as with the real client).
        Ok(self
            .sandboxd_at("readyz", address, key)?
            .is_some_and(|c| c.not_ready.is_empty()))
    }

    async fn readiness_message(&self, address: &str, key: &str) -> String {
        match self.sandboxd_at("readyz", address, key) {
            Ok(Some(c)) if c.not_ready.is_empty() => "200 ready".into(),
            Ok(Some(c)) => format!("503 not ready: {}", c.not_ready.join(", ")),
            Ok(None) => "401 wrong key".into(),
            Err(error) => error.to_string(),
        }
    }

    async fn activity(&self, address: &str, key: &str) -> Result<ActivityReport, ClientError> {
        self.step(Step::Activity)
            .await
            .map_err(|_| no_answer("activity", address))?;
        let container = self
            .sandboxd_at("activity", address, key)?
            .ok_or_else(|| wrong_key("activity"))?;
        Ok(ActivityReport {
            in_flight: container.in_flight,
            idle_secs: 0.0,
            ready: container.not_ready.is_empty(),
            not_ready: container.not_ready,
        })
    }

    async fn archive_home(
        &self,
        address: &str,
        key: &str,
        request: &HomeArchiveRequest,
        out: &mut tokio::fs::File,
        limit: u64,
    ) -> Result<u64, ClientError> {
        use tokio::io::AsyncWriteExt;
        self.step(Step::Archive)
            .await
            .map_err(|_| no_answer("home archive", address))?;
        let home = {
            let Some(container) = self.sandboxd_at("home archive", address, key)? else {
                return Err(wrong_key("home archive"));
            };
            // A folder alone is the browser profile (the only one the orchestrator asks for).
            match request.path {
                Some(_) => container.profile.clone(),
                None => container.home.clone(),
            }
        };
        if home.len() as u64 > limit {
            return Err(ClientError::TooLarge {
                operation: "home archive",
                limit,
            });
        }
        if request.keep_held {
            self.set_held(address, true);
        }
        out.write_all(&home)
            .await
            .map_err(|e| ClientError::Decode {
                operation: "home archive",
                reason: e.to_string(),
            })?;
        Ok(home.len() as u64)
    }

    async fn release_home(&self, address: &str, key: &str) -> Result<bool, ClientError> {
        if self.sandboxd_at("home release", address, key)?.is_none() {
            return Err(no_answer("home release", address));
        }
        Ok(self.set_held(address, false))
    }
}
