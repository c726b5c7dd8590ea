//! The informer: a watch thread keeping a local copy of one kind, and a
//! wake channel telling the control loop something changed.
//!
//! A control loop reads the [`Store`] (no request, no waiting) and is
//! woken through a channel of capacity one: the watch thread `try_send`s
//! after each change, so a burst of a thousand events leaves one wake-up
//! pending, not a thousand. The loop then reads the store's newest state,
//! which is the point of level-triggered control. Several informers may
//! share one wake channel, so one loop wakes for any of its kinds.
//!
//! Objects are held as `Arc<T>` so a loop can keep what it read while the
//! watch thread replaces entries.
//!
//! A loop that keeps state per object (a timer, a ledger entry) must drop
//! it when the object goes, and not every departure is a Deleted event:
//! an object deleted while the watch was down vanishes in the next relist,
//! and an object whose new version this build cannot read is dropped too.
//! [`Store::take_removed`] hands over every key removed since the last
//! call, whatever the cause.
//!
//! An informer's store is synced by its first LIST. An informer resuming
//! from a resourceVersion instead ([`Informer::spawn_seeded`]) is given
//! the objects that resourceVersion stands for, so its store is whole, and
//! synced, from the start.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};

use crate::client::Client;
use crate::object::Object;
use crate::request::Api;
use crate::watch::{Event, StopHandle, WatchStats, Watcher};

/// The informer's copy of one kind, keyed by [`Object::key`].
pub struct Store<T> {
    inner: Arc<StoreInner<T>>,
}

struct StoreInner<T> {
    objects: RwLock<HashMap<String, Arc<T>>>,
    synced: Mutex<bool>,
    synced_cv: Condvar,
    /// Keys removed since the last take_removed.
    removed: Mutex<HashSet<String>>,
}

impl<T> Clone for Store<T> {
    fn clone(&self) -> Store<T> {
        Store {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Object> Default for Store<T> {
    fn default() -> Store<T> {
        Store::new()
    }
}

impl<T: Object> Store<T> {
    /// An empty, unsynced store.
    pub fn new() -> Store<T> {
        Store {
            inner: Arc::new(StoreInner {
                objects: RwLock::new(HashMap::new()),
                synced: Mutex::new(false),
                synced_cv: Condvar::new(),
                removed: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// One object by key (the name, or `namespace/name`).
    pub fn get(&self, key: &str) -> Option<Arc<T>> {
        self.read().get(key).cloned()
    }

    /// Every object, in no particular order.
    pub fn list(&self) -> Vec<Arc<T>> {
        self.read().values().cloned().collect()
    }

    /// How many objects are held.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// Whether the first LIST has landed; before that an empty store
    /// means "not known yet", not "none exist".
    pub fn is_synced(&self) -> bool {
        *self.inner.synced.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits up to `timeout` for the first LIST.
    pub fn wait_synced(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut synced = self.inner.synced.lock().unwrap_or_else(|p| p.into_inner());
        while !*synced {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            synced = self
                .inner
                .synced_cv
                .wait_timeout(synced, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        true
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<T>>> {
        self.inner.objects.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Every key removed since the last call: deleted, gone from a
    /// relist, or dropped because its new version could not be read. A
    /// key that came back since is still listed (check the store).
    pub fn take_removed(&self) -> Vec<String> {
        let mut removed = self.inner.removed.lock().unwrap_or_else(|p| p.into_inner());
        let mut keys: Vec<String> = removed.drain().collect();
        removed.shrink_to(0);
        keys.sort();
        keys
    }

    fn note_removed(&self, keys: impl IntoIterator<Item = String>) {
        self.inner
            .removed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(keys);
    }

    /// Applies one watcher event.
    pub fn apply(&self, event: Event<T>) {
        let mut objects = self
            .inner
            .objects
            .write()
            .unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Restarted(items) => {
                let mut next = HashMap::with_capacity(items.len());
                for o in items {
                    next.insert(o.key(), Arc::new(o));
                }
                let old = std::mem::replace(&mut *objects, next);
                let gone: Vec<String> = old
                    .into_keys()
                    .filter(|k| !objects.contains_key(k))
                    .collect();
                drop(objects);
                self.note_removed(gone);
                let mut synced = self.inner.synced.lock().unwrap_or_else(|p| p.into_inner());
                *synced = true;
                self.inner.synced_cv.notify_all();
            }
            Event::Applied(o) => {
                objects.insert(o.key(), Arc::new(o));
            }
            Event::Deleted(o) => {
                let key = o.key();
                objects.remove(&key);
                drop(objects);
                self.note_removed([key]);
            }
            Event::Unreadable(u) => {
                if objects.remove(&u.key).is_some() {
                    drop(objects);
                    self.note_removed([u.key]);
                }
            }
        }
    }
}

/// A wake channel: capacity one, so pending wake-ups coalesce.
pub fn wake_channel() -> (Sender<()>, Receiver<()>) {
    bounded(1)
}

/// A watch thread feeding a [`Store`].
pub struct Informer<T> {
    store: Store<T>,
    stats: Arc<WatchStats>,
    stop: StopHandle,
    thread: Option<JoinHandle<()>>,
}

impl<T: Object> Informer<T> {
    /// Starts watching with `watcher`, from a LIST (a watcher told to
    /// `resume_from` lists all the same: a resume cannot fill a store; use
    /// [`Informer::spawn_seeded`]). Each change wakes `wake`.
    pub fn spawn(watcher: Watcher<T>, wake: Sender<()>) -> Informer<T> {
        Informer::spawn_observed(watcher, wake, |_| true)
    }

    /// As [`Informer::spawn`], and `observe` sees each event on the watch
    /// thread just before the store applies it, and answers whether it
    /// wakes the loop. A program that must note when an event arrived
    /// (the cluster operator records heartbeat renewals on its own clock)
    /// or hear of undecodable objects does it here; one that needs no
    /// wake for a kind of change (a Lease renewal judged by a ticker)
    /// answers false.
    pub fn spawn_observed(
        mut watcher: Watcher<T>,
        wake: Sender<()>,
        observe: impl FnMut(&Event<T>) -> bool + Send + 'static,
    ) -> Informer<T> {
        watcher.relist();
        Informer::run(watcher, Store::new(), wake, observe)
    }

    /// Starts from `seed`, the objects as of `resource_version` (kept from
    /// an earlier LIST), and watches on from there without listing: the
    /// store is synced at once. If the server no longer has that
    /// resourceVersion (410), the watcher lists and the store is replaced.
    pub fn spawn_seeded(
        mut watcher: Watcher<T>,
        seed: Vec<T>,
        resource_version: &str,
        wake: Sender<()>,
    ) -> Informer<T> {
        let store = Store::new();
        store.apply(Event::Restarted(seed));
        store.take_removed();
        watcher = watcher.resume_from(resource_version);
        Informer::run(watcher, store, wake, |_| true)
    }

    fn run(
        mut watcher: Watcher<T>,
        store: Store<T>,
        wake: Sender<()>,
        mut observe: impl FnMut(&Event<T>) -> bool + Send + 'static,
    ) -> Informer<T> {
        let stats = watcher.stats();
        let stop = watcher.stopper();
        let thread_store = store.clone();
        let thread = std::thread::Builder::new()
            .name("liken-kube-watch".into())
            .spawn(move || {
                watcher.run(&mut |event| {
                    let wakes = observe(&event);
                    thread_store.apply(event);
                    // Full means a wake-up is already pending: that one
                    // will see this change too.
                    if wakes {
                        let _ = wake.try_send(());
                    }
                });
            })
            .expect("spawning a watch thread");
        Informer {
            store,
            stats,
            stop,
            thread: Some(thread),
        }
    }

    /// Watches everything `api` addresses with the default watcher.
    pub fn start(client: Client, api: Api, wake: Sender<()>) -> Informer<T> {
        Informer::spawn(Watcher::new(client, api), wake)
    }

    /// The store this informer fills.
    pub fn store(&self) -> Store<T> {
        self.store.clone()
    }

    /// The watch counters.
    pub fn stats(&self) -> Arc<WatchStats> {
        self.stats.clone()
    }

    /// Stops the watch thread and waits for it: its connections are
    /// closed, so a read blocked on a quiet stream returns at once.
    pub fn stop(mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl<T> Drop for Informer<T> {
    fn drop(&mut self) {
        // Dropping without `stop` stops the thread without waiting for it.
        self.stop.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use liken_api::{Machine, MachineSpec};

    fn m(name: &str, rv: &str) -> Machine {
        let mut m = Machine::new(name, MachineSpec::default());
        m.metadata.resource_version = rv.into();
        m
    }

    #[test]
    fn events_replace_insert_and_remove() {
        let s: Store<Machine> = Store::new();
        assert!(!s.is_synced());
        assert!(!s.wait_synced(Duration::from_millis(10)));
        s.apply(Event::Applied(m("stale", "1")));
        s.apply(Event::Restarted(vec![m("a", "2"), m("b", "3")]));
        assert!(s.is_synced());
        assert!(
            s.get("stale").is_none(),
            "a relist drops what it no longer holds"
        );
        assert_eq!(s.len(), 2);
        s.apply(Event::Applied(m("a", "4")));
        assert_eq!(s.get("a").unwrap().metadata.resource_version, "4");
        s.apply(Event::Deleted(m("b", "5")));
        assert!(s.get("b").is_none());
        let mut names: Vec<String> = s.list().iter().map(|m| m.metadata.name.clone()).collect();
        names.sort();
        assert_eq!(names, ["a"]);
    }

    #[test]
    fn every_removal_is_handed_over_once() {
        let s: Store<Machine> = Store::new();
        s.apply(Event::Restarted(vec![
            m("a", "1"),
            m("b", "2"),
            m("c", "3"),
        ]));
        assert!(s.take_removed().is_empty());
        s.apply(Event::Deleted(m("a", "4")));
        // A relist without b: b was deleted while the watch was down.
        s.apply(Event::Restarted(vec![m("c", "3"), m("d", "5")]));
        // c's new version cannot be read: dropped.
        s.apply(Event::Unreadable(crate::object::Unreadable {
            key: "c".into(),
            resource_version: "6".into(),
            message: "status.phase: unknown variant".into(),
        }));
        // An unreadable object the store never held changes nothing.
        s.apply(Event::Unreadable(crate::object::Unreadable {
            key: "zz".into(),
            resource_version: "7".into(),
            message: "x".into(),
        }));
        assert_eq!(s.take_removed(), ["a", "b", "c"]);
        assert!(s.take_removed().is_empty());
        let mut keys: Vec<String> = s.list().iter().map(|m| m.key()).collect();
        keys.sort();
        assert_eq!(keys, ["d"]);
    }

    #[test]
    fn a_burst_wakes_once() {
        let (tx, rx) = wake_channel();
        for _ in 0..1000 {
            let _ = tx.try_send(());
        }
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn waiting_for_sync_returns_when_it_lands() {
        let s: Store<Machine> = Store::new();
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.wait_synced(Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        s.apply(Event::Restarted(vec![]));
        assert!(t.join().unwrap());
    }
}
