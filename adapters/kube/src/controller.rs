//! The kube-runtime controller: a Server watch feeding the wake filter,
//! one pass per wake, and a fixed-interval requeue after Yield or Error
//! (never exponential back-off). Terminal and Done wait for the next wake.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, stream};
use kube::runtime::controller::{Action as Requeue, Config as RuntimeConfig, Controller};
use kube::runtime::utils::Backoff;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, Client, ResourceExt};
use server_core::Outcome;
use tracing::{debug, info, warn};

use crate::cache::Caches;
use crate::config::ControllerConfig;
use crate::crd::Server;
use crate::error::Error;
use crate::executor::Executor;
use crate::shutdown::Shutdown;
use crate::wake::wake_stream;

/// What to do after a pass: requeue at the fixed interval after Yield or
/// Error, otherwise wait for a wake.
pub fn requeue_for(outcome: &Outcome, config: &ControllerConfig) -> Option<Duration> {
    outcome.requeues().then_some(config.yield_interval)
}

pub(crate) fn servers_api(client: Client, namespace: Option<&str>) -> Api<Server> {
    match namespace {
        Some(namespace) => Api::namespaced(client, namespace),
        None => Api::all(client),
    }
}

/// What every pass shares: the executor and the caches it reads from.
struct Context {
    executor: Arc<Executor>,
    caches: Caches,
}

/// Runs the controller until `shutdown` resolves; in-flight passes finish.
/// `ready` turns true once the Server store holds its first list.
pub(crate) async fn run(
    executor: Arc<Executor>,
    caches: Caches,
    shutdown: Shutdown,
    ready: Arc<tokio::sync::watch::Sender<bool>>,
) -> Result<(), Error> {
    let config = executor.config.clone();
    let api = servers_api(executor.client.clone(), config.namespace.as_deref());
    let (reader, writer) = reflector::store();
    let store = reader.clone();
    let events =
        watcher(api, watcher::Config::default()).backoff(FixedBackoff(config.watch_retry_interval)).reflect(writer);
    let mut controller = Controller::for_stream(wake_stream(events), reader)
        .with_config(RuntimeConfig::default().concurrency(config.concurrency))
        .trigger_backoff(FixedBackoff(config.watch_retry_interval))
        .graceful_shutdown_on(shutdown);
    if let Some(interval) = config.resync_interval {
        controller = controller.reconcile_all_on(resync_ticks(interval));
    }
    // A new leader passes over every Server: the previous leader's requeues
    // died with its term.
    controller = controller.reconcile_all_on(executor.fence.new_terms());
    info!(namespace = config.namespace.as_deref().unwrap_or("<all>"), "server controller started");
    let passes =
        controller.run(reconcile, error_policy, Arc::new(Context { executor, caches })).for_each(|result| async move {
            match result {
                Ok((object, requeue)) => debug!(server = %object.name, ?requeue, "pass finished"),
                Err(error) => debug!(%error, "controller event"),
            }
        });
    let mut passes = std::pin::pin!(passes);
    tokio::select! {
        () = &mut passes => {}
        filled = store.wait_until_ready() => {
            if filled.is_ok() {
                ready.send_replace(true);
            }
            passes.await;
        }
    }
    info!("server controller stopped");
    Ok(())
}

async fn reconcile(server: Arc<Server>, context: Arc<Context>) -> Result<Requeue, Error> {
    let executor = &context.executor;
    // A follower only keeps its store warm; the leader's new term wakes everything.
    if !executor.fence.holds() {
        return Ok(Requeue::await_change());
    }
    let _in_flight = executor.progress.pass_started();
    let started = Instant::now();
    let result = executor.reconcile(&server, &context.caches).await;
    let elapsed = started.elapsed();
    match result {
        Ok(outcome) => {
            executor.metrics.reconcile_finished(outcome.label(), elapsed);
            let (name, namespace) = (server.name_any(), server.namespace().unwrap_or_default());
            match &outcome {
                Outcome::Done => debug!(server = %name, %namespace, ?elapsed, "reconciled: done"),
                Outcome::Yield(reason) => debug!(server = %name, %namespace, %reason, "reconciled: yield"),
                Outcome::Terminal(reason) => info!(server = %name, %namespace, %reason, "reconciled: parked"),
                Outcome::Error(reason) => warn!(server = %name, %namespace, %reason, "reconciled: error"),
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
fn error_policy(server: Arc<Server>, error: &Error, context: Arc<Context>) -> Requeue {
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

/// A constant delay between watch retries.
#[derive(Clone, Copy, Debug)]
pub(crate) struct FixedBackoff(pub(crate) Duration);

impl Iterator for FixedBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.0)
    }
}

impl Backoff for FixedBackoff {
    fn reset(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_yield_and_error_requeue_and_always_at_the_fixed_interval() {
        let config = ControllerConfig { yield_interval: Duration::from_millis(250), ..Default::default() };
        assert_eq!(requeue_for(&Outcome::Yield("x".into()), &config), Some(Duration::from_millis(250)));
        assert_eq!(requeue_for(&Outcome::Error("x".into()), &config), Some(Duration::from_millis(250)));
        assert_eq!(requeue_for(&Outcome::Done, &config), None);
        assert_eq!(requeue_for(&Outcome::Terminal("x".into()), &config), None);
    }
}
