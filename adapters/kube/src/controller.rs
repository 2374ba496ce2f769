//! The kube-runtime controller: a Server watch feeding the wake filter,
//! one pass per wake (and per Server whose first latch the monitor could not
//! write), and a fixed-interval requeue after Yield or Error (never
//! exponential back-off). Terminal and Done wait for the next wake.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, stream};
use kube::ResourceExt;
use kube::runtime::controller::{Action as Requeue, Config as RuntimeConfig, Controller};
use kube::runtime::reflector::ObjectRef;
use server_core::Outcome;
use tracing::{debug, info, warn};

use crate::cache::{Caches, Wakes};
use crate::cached::CachedServer;
use crate::config::ControllerConfig;
use crate::error::Error;
use crate::executor::Executor;
use crate::monitor::LatchWoken;
use crate::shutdown::Shutdown;
use crate::slots::{self, Slot};

/// What to do after a pass: requeue after Yield or Error (at the fixed
/// interval, or as long as the provider's `Retry-After` asked, bounded: the
/// core's `Outcome::requeue_after`), otherwise wait for a wake.
pub fn requeue_for(outcome: &Outcome, config: &ControllerConfig) -> Option<Duration> {
    outcome.requeue_after(config.yield_interval)
}

/// What every pass shares: the executor, the caches it reads from, and the
/// shutdown that ends the passes still waiting for a slot.
struct Context {
    executor: Arc<Executor>,
    caches: Caches,
    shutdown: Shutdown,
}

/// Runs the controller until `shutdown` resolves; in-flight passes finish.
/// Its triggers are the wakes of the Server watch the caches run.
pub(crate) async fn run(
    executor: Arc<Executor>,
    caches: Caches,
    mut wakes: Wakes,
    mut monitor_wakes: LatchWoken,
    shutdown: Shutdown,
) {
    let config = executor.config.clone();
    let trigger = stream::poll_fn(move |cx| wakes.poll_recv(cx));
    // kube-runtime starts a bounded multiple of the passes at once; each
    // then waits for one of the executor's slots (`slots`), which it gives up
    // while it waits on references.
    let mut controller = Controller::for_shared_stream(trigger, caches.servers.clone())
        .with_config(RuntimeConfig::default().concurrency(slots::admitted(config.concurrency)))
        .reconcile_on(stream::poll_fn(move |cx| monitor_wakes.poll_recv(cx)))
        .graceful_shutdown_on(shutdown.clone());
    if let Some(interval) = config.resync_interval {
        controller = controller.reconcile_all_on(resync_ticks(interval));
    }
    // A new leader passes over every Server: the previous leader's requeues
    // died with its term.
    controller = controller.reconcile_all_on(executor.fence.new_terms());
    info!(namespace = config.namespace.as_deref().unwrap_or("<all>"), "server controller started");
    controller
        .run(reconcile, error_policy, Arc::new(Context { executor, caches, shutdown }))
        .for_each(|result| async move {
            match result {
                Ok((object, requeue)) => debug!(server = %object.name, ?requeue, "pass finished"),
                Err(error) => debug!(%error, "controller event"),
            }
        })
        .await;
    info!("server controller stopped");
}

/// A pass waits for a slot, then acts on the store's copy of its Server as
/// it is then (a started pass may have waited behind others). The pass
/// itself is boxed once it runs.
async fn reconcile(queued: Arc<CachedServer>, context: Arc<Context>) -> Result<Requeue, Error> {
    let mut slot = tokio::select! {
        slot = context.executor.slots.acquire() => slot,
        () = context.shutdown.clone() => return Ok(Requeue::await_change()),
    };
    let Some(server) = context.caches.servers.get(&ObjectRef::from_obj(&*queued)) else {
        return Ok(Requeue::await_change());
    };
    Box::pin(pass(server, &context, &mut slot)).await
}

async fn pass(server: Arc<CachedServer>, context: &Context, slot: &mut Slot<'_>) -> Result<Requeue, Error> {
    let executor = &context.executor;
    // A follower only keeps its store warm; the leader's new term wakes everything.
    let Some(term) = executor.terms.current() else {
        return Ok(Requeue::await_change());
    };
    let _in_flight = executor.progress.pass_started();
    let started = Instant::now();
    let result = executor.reconcile(&term, &server, &context.caches, slot).await;
    let elapsed = started.elapsed();
    match result {
        Ok(outcome) => {
            executor.metrics.reconcile_finished(outcome.label(), elapsed);
            let (name, namespace) = (server.name_any(), server.namespace().unwrap_or_default());
            match &outcome {
                Outcome::Done => debug!(server = %name, %namespace, ?elapsed, "reconciled: done"),
                Outcome::Yield(wait) => {
                    debug!(server = %name, %namespace, reason = %wait.message(), "reconciled: yield")
                }
                Outcome::Terminal(park) => {
                    let (park, reason) = (park.kind().as_str(), park.message());
                    info!(server = %name, %namespace, park, %reason, "reconciled: parked")
                }
                Outcome::Error(error) => warn!(server = %name, %namespace, reason = %error, "reconciled: error"),
            }
            Ok(match requeue_for(&outcome, &executor.config) {
                Some(after) => Requeue::requeue(after),
                None => Requeue::await_change(),
            })
        }
        Err(error) => {
            executor.metrics.reconcile_finished("failed", elapsed);
            Err(error)
        }
    }
}

/// A pass whose facts could not be read is retried at the same fixed interval.
fn error_policy(server: Arc<CachedServer>, error: &Error, context: Arc<Context>) -> Requeue {
    warn!(server = %server.name_any(), namespace = %server.namespace().unwrap_or_default(), %error, "pass failed");
    Requeue::requeue(context.executor.config.yield_interval)
}

/// Ticks every `interval`, starting one interval from now (the initial list
/// already wakes every Server).
fn resync_ticks(interval: Duration) -> impl futures_util::Stream<Item = ()> + Send + 'static {
    stream::unfold((), move |()| async move {
        tokio::time::sleep(interval).await;
        Some(((), ()))
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use jiff::Timestamp;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::cache::server_wakes;
    use crate::crd::{Server, ServerResourceSpec};

    fn server(name: &str, resource_version: u64) -> Server {
        let mut server = Server::new(name, ServerResourceSpec::default());
        server.metadata.namespace = Some("ns".into());
        server.metadata.uid = Some(format!("uid-{name}"));
        server.metadata.generation = Some(1);
        server.metadata.resource_version = Some(resource_version.to_string());
        server
    }

    fn deleting(mut server: Server) -> Server {
        server.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH));
        server.metadata.generation = Some(2);
        server
    }

    /// (name, resourceVersion) of every Server a pass ran on, in order.
    type Passes = Arc<Mutex<Vec<(String, String)>>>;

    async fn passes_until(passes: &Passes, expected: &[(&str, &str)]) -> Vec<(String, String)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            let seen = passes.lock().map(|p| p.clone()).unwrap_or_default();
            let all = expected.iter().all(|(name, rv)| seen.iter().any(|(n, r)| n == name && r == rv));
            if all || tokio::time::Instant::now() > deadline {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A relist whose first page brings a new Server and one whose deletion
    /// started, with a round trip to the API server before the second page:
    /// each gets a pass that reads the relisted object, not the copy from
    /// before the relist (or none at all).
    #[tokio::test]
    async fn a_relist_on_two_pages_wakes_with_the_relisted_objects() {
        let (events, mut script) =
            tokio::sync::mpsc::unbounded_channel::<Result<Event<CachedServer>, kube::runtime::watcher::Error>>();
        let script = stream::poll_fn(move |cx| script.poll_recv(cx));
        let (store, wakes) = server_wakes(script, Arc::new(tokio::sync::watch::channel(true).0), Arc::new(|_, _| ()));
        let passes: Passes = Arc::default();
        let recorded = passes.clone();
        let controller = Controller::for_shared_stream(wakes, store).run(
            move |server: Arc<CachedServer>, _: Arc<()>| {
                let recorded = recorded.clone();
                async move {
                    let rv = server.resource_version().unwrap_or_default();
                    if let Ok(mut passes) = recorded.lock() {
                        passes.push((server.name_any(), rv));
                    }
                    Ok::<_, Error>(Requeue::await_change())
                }
            },
            |_, _, _| Requeue::await_change(),
            Arc::new(()),
        );
        let running = tokio::spawn(controller.for_each(|_| async {}));
        let send = |event: Event<Server>| {
            let event = match event {
                Event::InitApply(server) => Event::InitApply(CachedServer::new(server)),
                Event::Apply(server) => Event::Apply(CachedServer::new(server)),
                Event::Delete(server) => Event::Delete(CachedServer::new(server)),
                Event::Init => Event::Init,
                Event::InitDone => Event::InitDone,
            };
            events.send(Ok(event)).expect("the controller listens")
        };

        send(Event::Init);
        send(Event::InitApply(server("a", 1)));
        send(Event::InitApply(server("b", 2)));
        send(Event::InitDone);
        let initial = passes_until(&passes, &[("a", "1"), ("b", "2")]).await;
        assert_eq!(initial.len(), 2, "{initial:?}");

        // The watch was cut; meanwhile `a` started deleting and `new` was created.
        send(Event::Init);
        send(Event::InitApply(deleting(server("a", 5))));
        send(Event::InitApply(server("new", 6)));
        // The round trip for page 2: the controller runs meanwhile.
        tokio::time::sleep(Duration::from_millis(200)).await;
        send(Event::InitApply(server("b", 2)));
        send(Event::InitDone);
        let after = passes_until(&passes, &[("a", "5"), ("new", "6")]).await;
        running.abort();
        assert!(after.contains(&("a".into(), "5".into())), "the deleting Server's pass saw it deleting: {after:?}");
        assert!(after.contains(&("new".into(), "6".into())), "the new Server got a pass: {after:?}");
        assert!(!after[2..].iter().any(|(name, _)| name == "b"), "unchanged b does not wake: {after:?}");
    }

    #[test]
    fn only_yield_and_error_requeue_and_always_at_the_fixed_interval() {
        let config = ControllerConfig { yield_interval: Duration::from_millis(250), ..Default::default() };
        let failure = server_core::ApiFailure::new("writing", server_core::ApiCause::NoAnswer("x".into()));
        let conflict = Outcome::Yield(server_core::Wait::Conflict(failure.clone()));
        assert_eq!(requeue_for(&conflict, &config), Some(Duration::from_millis(250)));
        let api = Outcome::Error(server_core::PassError::Api(failure));
        assert_eq!(requeue_for(&api, &config), Some(Duration::from_millis(250)));
        assert_eq!(requeue_for(&Outcome::Done, &config), None);
        assert_eq!(requeue_for(&Outcome::Terminal(server_core::Park::MissingAfterBoot), &config), None);
    }
}
