//! Watch streams, raw and through kube-runtime's `watcher`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures_util::{StreamExt, TryStreamExt};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, ResourceExt, WatchEvent, WatchParams};
use kube::runtime::watcher;
use serde_json::json;
use server_simkube::{FaultConfig, FaultKind, Verb};

use crate::common::{Widget, client, sim, widget, within};

async fn list_version(widgets: &Api<Widget>) -> String {
    widgets.list(&ListParams::default()).await.expect("list").metadata.resource_version.expect("list resourceVersion")
}

fn describe(event: &WatchEvent<Widget>) -> String {
    match event {
        WatchEvent::Added(w) => format!("ADDED {}", w.name_any()),
        WatchEvent::Modified(w) => format!("MODIFIED {} size={}", w.name_any(), w.spec.size),
        WatchEvent::Deleted(w) => format!("DELETED {}", w.name_any()),
        WatchEvent::Bookmark(_) => "BOOKMARK".to_string(),
        WatchEvent::Error(status) => format!("ERROR {}", status.code),
    }
}

#[tokio::test]
async fn watch_reports_changes_after_a_resource_version() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    widgets.create(&PostParams::default(), &widget("before", 1)).await.expect("create");
    let version = list_version(&widgets).await;
    let stream = widgets.watch(&WatchParams::default().timeout(5).disable_bookmarks(), &version).await.expect("watch");
    let mut stream = stream.boxed();

    widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    widgets.patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 2}}))).await.expect("patch");
    widgets.delete("a", &DeleteParams::default()).await.expect("delete");

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = within("watch event", stream.try_next()).await.expect("event").expect("stream open");
        seen.push(describe(&event));
    }
    assert_eq!(seen, ["ADDED a", "MODIFIED a size=2", "DELETED a"]);

    // resourceVersion "0" starts with the current objects.
    let mut from_zero =
        widgets.watch(&WatchParams::default().timeout(5).disable_bookmarks(), "0").await.expect("watch").boxed();
    let first = within("initial event", from_zero.try_next()).await.expect("event").expect("open");
    assert_eq!(describe(&first), "ADDED before");
}

#[tokio::test]
async fn label_selected_watches_see_objects_enter_and_leave() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let version = list_version(&widgets).await;
    let mut stream = widgets
        .watch(&WatchParams::default().labels("app=web").timeout(5).disable_bookmarks(), &version)
        .await
        .expect("watch")
        .boxed();

    let relabel = |app: &'static str| {
        let widgets = widgets.clone();
        async move {
            widgets
                .patch("a", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"app": app}}})))
                .await
                .expect("relabel");
        }
    };
    widgets.create(&PostParams::default(), &widget("unlabelled", 1)).await.expect("create");
    let mut labelled = widget("a", 1);
    labelled.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    widgets.create(&PostParams::default(), &labelled).await.expect("create");
    relabel("db").await;
    relabel("web").await;

    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = within("event", stream.try_next()).await.expect("event").expect("open");
        seen.push(describe(&event));
    }
    assert_eq!(seen, ["ADDED a", "DELETED a", "ADDED a"]);
}

#[tokio::test]
async fn bookmarks_and_timeouts() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let version = list_version(&widgets).await;
    let started = Instant::now();
    let mut stream = widgets.watch(&WatchParams::default().timeout(1), &version).await.expect("watch").boxed();
    let first = within("bookmark", stream.try_next()).await.expect("event").expect("open");
    match first {
        WatchEvent::Bookmark(bookmark) => {
            assert_eq!(bookmark.metadata.resource_version, version);
        }
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // The stream ends by itself at timeoutSeconds.
    within("timeout", async { while stream.try_next().await.expect("event").is_some() {} }).await;
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(3), "{elapsed:?}");
}

#[tokio::test]
async fn compacted_versions_get_410_gone_as_an_error_event() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let old = list_version(&widgets).await;
    widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    sim.compact();

    let mut stream =
        widgets.watch(&WatchParams::default().timeout(5), &old).await.expect("the watch itself is accepted").boxed();
    let event = within("error event", stream.try_next()).await.expect("event").expect("open");
    match event {
        WatchEvent::Error(status) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected 410, got {other:?}"),
    }
    assert!(within("end", stream.try_next()).await.expect("ends").is_none());

    // The current version is still good.
    let current = list_version(&widgets).await;
    let mut stream =
        widgets.watch(&WatchParams::default().timeout(5).disable_bookmarks(), &current).await.expect("watch").boxed();
    widgets.create(&PostParams::default(), &widget("b", 1)).await.expect("create");
    let event = within("event", stream.try_next()).await.expect("event").expect("open");
    assert_eq!(describe(&event), "ADDED b");
    assert_eq!(sim.counters().watch_gones, 1);
}

#[tokio::test]
async fn ended_watches_close_and_resume_from_their_version() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let version = list_version(&widgets).await;
    let params = WatchParams::default().timeout(30).disable_bookmarks();
    let mut stream = widgets.watch(&params, &version).await.expect("watch").boxed();
    sim.end_watches();
    assert!(within("closed", stream.try_next()).await.expect("ends cleanly").is_none());

    widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    let mut resumed = widgets.watch(&params, &version).await.expect("watch").boxed();
    let event = within("event", resumed.try_next()).await.expect("event").expect("open");
    assert_eq!(describe(&event), "ADDED a", "nothing after the version is lost");
}

#[tokio::test]
async fn bounded_history_expires_old_versions() {
    let sim = server_simkube::SimKube::builder().history_limit(3).history_fresh_for(Duration::ZERO).build();
    sim.install_crd(serde_json::to_value(<Widget as kube::CustomResourceExt>::crd()).expect("crd")).expect("install");
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let old = list_version(&widgets).await;
    for name in ["a", "b", "c", "d", "e"] {
        widgets.create(&PostParams::default(), &widget(name, 1)).await.expect("create");
    }
    let mut stream = widgets.watch(&WatchParams::default().timeout(5), &old).await.expect("watch").boxed();
    let event = within("event", stream.try_next()).await.expect("event").expect("open");
    assert_eq!(describe(&event), "ERROR 410");
}

#[tokio::test]
async fn changes_younger_than_the_fresh_window_outlive_the_limits_like_the_watch_cache() {
    // The default window (75 s) keeps all five changes past a limit of three.
    let sim = server_simkube::SimKube::builder().history_limit(3).build();
    sim.install_crd(serde_json::to_value(<Widget as kube::CustomResourceExt>::crd()).expect("crd")).expect("install");
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let old = list_version(&widgets).await;
    for name in ["a", "b", "c", "d", "e"] {
        widgets.create(&PostParams::default(), &widget(name, 1)).await.expect("create");
    }
    let params = WatchParams::default().timeout(5).disable_bookmarks();
    let mut stream = widgets.watch(&params, &old).await.expect("watch").boxed();
    let event = within("event", stream.try_next()).await.expect("event").expect("open");
    assert_eq!(describe(&event), "ADDED a", "a fresh change was dropped");
    assert_eq!(sim.counters().watch_gones, 0);
}

/// A widget carrying `bytes` of annotation, like a Server carrying user data.
fn bulky_widget(name: &str, bytes: usize) -> Widget {
    let mut bulky = widget(name, 1);
    bulky.metadata.annotations = Some([("bulk".to_string(), "x".repeat(bytes))].into());
    bulky
}

#[tokio::test]
async fn history_of_large_objects_is_bounded_by_bytes_and_expires_like_the_watch_cache() {
    // 1,000 changes allowed, 64 KiB of versions: five 16 KiB objects do not fit.
    let build = || {
        let sim = server_simkube::SimKube::builder()
            .history_limit(1000)
            .history_bytes(64 << 10)
            .history_fresh_for(Duration::ZERO)
            .build();
        let crd = serde_json::to_value(<Widget as kube::CustomResourceExt>::crd()).expect("crd");
        sim.install_crd(crd).expect("install");
        sim
    };
    let sim = build();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let old = list_version(&widgets).await;
    for name in ["a", "b", "c", "d", "e"] {
        widgets.create(&PostParams::default(), &bulky_widget(name, 16 << 10)).await.expect("create");
    }
    let recent = list_version(&widgets).await;
    let mut stream = widgets.watch(&WatchParams::default().timeout(5), &old).await.expect("watch").boxed();
    let event = within("event", stream.try_next()).await.expect("event").expect("open");
    assert_eq!(describe(&event), "ERROR 410", "the oldest changes were dropped for their size");
    assert_eq!(sim.counters().watch_gones, 1);

    // The newest changes are still served, and small objects keep them all.
    let params = WatchParams::default().timeout(5).disable_bookmarks();
    let mut stream = widgets.watch(&params, &recent).await.expect("watch").boxed();
    widgets.create(&PostParams::default(), &bulky_widget("f", 16 << 10)).await.expect("create");
    let event = within("event", stream.try_next()).await.expect("event").expect("open");
    assert_eq!(describe(&event), "ADDED f");
    let sim = build();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let old = list_version(&widgets).await;
    for name in ["a", "b", "c", "d", "e"] {
        widgets.create(&PostParams::default(), &bulky_widget(name, 16)).await.expect("create");
    }
    let mut stream = widgets.watch(&params, &old).await.expect("watch").boxed();
    let event = within("event", stream.try_next()).await.expect("event").expect("open");
    assert_eq!(describe(&event), "ADDED a", "small objects: every change is kept");
}

/// Names the watcher has applied so far.
fn applied(event: &watcher::Event<Widget>, names: &mut BTreeSet<String>) {
    match event {
        watcher::Event::Apply(w) | watcher::Event::InitApply(w) => {
            names.insert(w.name_any());
        }
        watcher::Event::Delete(w) => {
            names.remove(&w.name_any());
        }
        watcher::Event::Init | watcher::Event::InitDone => {}
    }
}

#[tokio::test]
async fn watcher_survives_cut_streams_without_relisting() {
    let sim = sim();
    sim.faults().set(FaultConfig::none().with_watch_cut_after(2));
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let mut stream = watcher(widgets.clone(), watcher::Config::default()).boxed();
    let mut names = BTreeSet::new();
    loop {
        let event = within("init", stream.try_next()).await.expect("event").expect("open");
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    for index in 0..10 {
        widgets.create(&PostParams::default(), &widget(&format!("w{index}"), 1)).await.expect("create");
    }
    while names.len() < 10 {
        let event = within("apply", stream.try_next()).await.expect("no error").expect("open");
        applied(&event, &mut names);
    }
    let counters = sim.counters();
    assert!(counters.watch_cuts >= 4, "{counters:?}");
    assert_eq!(counters.count(Verb::List, "widgets"), 1, "resumed, never relisted");
    assert!(counters.count(Verb::Watch, "widgets") >= 5);
}

#[tokio::test]
async fn watcher_relists_after_410_on_open_and_new_streams() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    let mut stream = watcher(widgets.clone(), watcher::Config::default()).boxed();
    let mut names = BTreeSet::new();

    // Synced, then the history is compacted before the watch starts.
    loop {
        let event = within("init", stream.try_next()).await.expect("event").expect("open");
        applied(&event, &mut names);
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    widgets.create(&PostParams::default(), &widget("b", 1)).await.expect("create");
    sim.compact();

    let mut saw_gone = false;
    while !(saw_gone && names.contains("b")) {
        match within("relist", stream.next()).await.expect("open") {
            Ok(event) => applied(&event, &mut names),
            Err(watcher::Error::WatchError(status)) if status.code == 410 => saw_gone = true,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(sim.counters().count(Verb::List, "widgets"), 2);

    // Now with the stream open: a compaction behind it is noticed on its next read.
    widgets.create(&PostParams::default(), &widget("c", 1)).await.expect("create");
    while !names.contains("c") {
        let event = within("apply c", stream.try_next()).await.expect("ok").expect("open");
        applied(&event, &mut names);
    }
    widgets.create(&PostParams::default(), &widget("d", 1)).await.expect("create");
    sim.compact();
    let mut saw_gone = false;
    while !(saw_gone && names.contains("d")) {
        match within("relist", stream.next()).await.expect("open") {
            Ok(event) => applied(&event, &mut names),
            Err(watcher::Error::WatchError(status)) if status.code == 410 => saw_gone = true,
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(sim.counters().count(Verb::List, "widgets"), 3);
    assert_eq!(names.len(), 4);
}

#[tokio::test]
async fn watcher_relists_after_an_injected_gone() {
    let sim = sim();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    sim.faults().fail_next(Verb::Watch, Some("widgets"), FaultKind::Gone, 1);
    let mut stream = watcher(widgets.clone(), watcher::Config::default()).boxed();
    let mut errors = 0;
    let mut names = BTreeSet::new();
    let mut inits = 0;
    while inits < 2 {
        match within("events", stream.next()).await.expect("open") {
            Ok(event) => {
                if matches!(event, watcher::Event::InitDone) {
                    inits += 1;
                }
                applied(&event, &mut names);
            }
            Err(watcher::Error::WatchError(status)) => {
                assert_eq!(status.code, 410);
                errors += 1;
            }
            Err(other) => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(errors, 1);
    assert_eq!(sim.counters().total_faults(), 1);
}

#[tokio::test]
async fn watcher_with_streaming_lists() {
    let sim = sim();
    sim.faults().set(FaultConfig::none().with_watch_cut_after(1));
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    for name in ["a", "b", "c"] {
        widgets.create(&PostParams::default(), &widget(name, 1)).await.expect("create");
    }
    let config = watcher::Config::default().streaming_lists();
    let mut stream = watcher(widgets.clone(), config).boxed();
    let mut names = BTreeSet::new();
    loop {
        let event = within("initial events", stream.try_next()).await.expect("event").expect("open");
        applied(&event, &mut names);
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    assert_eq!(names.len(), 3, "initial events are not cut");
    widgets.delete("b", &DeleteParams::default()).await.expect("delete");
    widgets.create(&PostParams::default(), &widget("d", 1)).await.expect("create");
    while names.contains("b") || !names.contains("d") {
        let event = within("changes", stream.try_next()).await.expect("event").expect("open");
        applied(&event, &mut names);
    }
    assert_eq!(sim.counters().count(Verb::List, "widgets"), 0, "no list calls");
}

#[tokio::test]
async fn watcher_survives_probabilistic_cuts() {
    let sim = sim();
    sim.faults().set(FaultConfig::none().with_watch_cut_probability(0.5));
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let mut stream = watcher(widgets.clone(), watcher::Config::default()).boxed();
    let mut names = BTreeSet::new();
    loop {
        let event = within("init", stream.try_next()).await.expect("event").expect("open");
        if matches!(event, watcher::Event::InitDone) {
            break;
        }
    }
    for index in 0..20 {
        widgets.create(&PostParams::default(), &widget(&format!("w{index}"), 1)).await.expect("create");
    }
    while names.len() < 20 {
        let event = within("apply", stream.try_next()).await.expect("no error").expect("open");
        applied(&event, &mut names);
    }
    assert!(sim.counters().watch_cuts > 0);
}

#[tokio::test]
async fn store_waits_wake_on_changes() {
    let sim = sim();
    let store = sim.store();
    let widgets: Api<Widget> = Api::namespaced(client(&sim), "default");
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move {
            store.wait_for("widgets", Some("default"), "a", Duration::from_secs(5), |w| w["spec"]["size"] == 2).await
        })
    };
    widgets.create(&PostParams::default(), &widget("a", 1)).await.expect("create");
    widgets.patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"size": 2}}))).await.expect("patch");
    let seen = within("wait_for", waiter).await.expect("task").expect("condition met");
    assert_eq!(seen["spec"]["size"], 2);
    assert!(
        store
            .wait_for("widgets", Some("default"), "a", Duration::from_millis(20), |w| w["spec"]["size"] == 3)
            .await
            .is_none(),
        "times out"
    );
    assert!(!store.wait_for_absent("nothing", None, "x", Duration::from_millis(1)).await);
}
