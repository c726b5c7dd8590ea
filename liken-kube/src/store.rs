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

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, bounded};

use crate::client::Client;
use crate::object::Object;
use crate::request::Api;
use crate::watch::{Event, WatchStats, Watcher};

/// The informer's copy of one kind, keyed by [`Object::key`].
pub struct Store<T> {
    inner: Arc<StoreInner<T>>,
}

struct StoreInner<T> {
    objects: RwLock<HashMap<String, Arc<T>>>,
    synced: Mutex<bool>,
    synced_cv: Condvar,
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

    /// Applies one watcher event.
    pub fn apply(&self, event: Event<T>) {
        let mut objects = self
            .inner
            .objects
            .write()
            .unwrap_or_else(|p| p.into_inner());
        match event {
            Event::Restarted(items) => {
                objects.clear();
                objects.shrink_to(items.len());
                for o in items {
                    objects.insert(o.key(), Arc::new(o));
                }
                drop(objects);
                let mut synced = self.inner.synced.lock().unwrap_or_else(|p| p.into_inner());
                *synced = true;
                self.inner.synced_cv.notify_all();
            }
            Event::Applied(o) => {
                objects.insert(o.key(), Arc::new(o));
            }
            Event::Deleted(o) => {
                objects.remove(&o.key());
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
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl<T: Object> Informer<T> {
    /// Starts watching with `watcher`; each change wakes `wake`.
    pub fn spawn(mut watcher: Watcher<T>, wake: Sender<()>) -> Informer<T> {
        let store = Store::new();
        let stats = watcher.stats();
        let stop = watcher.stopper();
        let thread_store = store.clone();
        let thread = std::thread::Builder::new()
            .name("liken-kube-watch".into())
            .spawn(move || {
                watcher.run(&mut |event| {
                    thread_store.apply(event);
                    // Full means a wake-up is already pending: that one
                    // will see this change too.
                    let _ = wake.try_send(());
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

    /// Asks the watch thread to stop and waits for it. It stops at the
    /// next event or the end of the current stream (the watch timeout).
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl<T> Drop for Informer<T> {
    fn drop(&mut self) {
        // Dropping without `stop` leaves the thread to end on its own.
        self.stop.store(true, Ordering::Relaxed);
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
