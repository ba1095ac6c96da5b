//! The container target against Podman's Docker Engine API (`unix:///tmp/podman.sock`, or
//! `SUNDIAL_TEST_CONTAINER_URL`) with the local image `localhost/busybox:test`
//! (`scripts/podman-setup.sh` makes both; these tests run it when the engine does not answer).
//!
//! The tests fail when the engine cannot be set up; `SUNDIAL_SKIP_CONTAINER_TESTS=1` skips
//! them with a message instead. Containers are named after unique execution ids, so test
//! binaries may run in parallel.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bollard::Docker;
use common::{delivery, execution_id};
use sundial_core::job::{ContainerTarget as ContainerSpec, TargetSpec};
use sundial_target::{ContainerTarget, LOG_TAIL_BYTES, Target};
use tokio::sync::OnceCell;

const IMAGE: &str = "localhost/busybox:test";

fn engine_url() -> String {
    common::url("CONTAINER", "unix:///tmp/podman.sock")
}

fn skipped() -> bool {
    if std::env::var("SUNDIAL_SKIP_CONTAINER_TESTS").as_deref() == Ok("1") {
        eprintln!(
            "\n!!! SKIPPED: container target test (SUNDIAL_SKIP_CONTAINER_TESTS=1); \
             the container target is NOT tested in this run !!!\n"
        );
        true
    } else {
        false
    }
}

/// A target on the engine; the first call in a test binary runs `scripts/podman-setup.sh`
/// when the engine does not answer. Panics when it still cannot connect.
async fn target() -> ContainerTarget {
    static SET_UP: OnceCell<()> = OnceCell::const_new();
    SET_UP
        .get_or_init(|| async {
            if ContainerTarget::connect(&engine_url()).await.is_ok() {
                return;
            }
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/podman-setup.sh");
            let status = tokio::process::Command::new("bash")
                .arg(script)
                .status()
                .await
                .expect("run scripts/podman-setup.sh");
            assert!(status.success(), "scripts/podman-setup.sh failed: {status}");
        })
        .await;
    // One client per test: each test has its own runtime.
    ContainerTarget::connect(&engine_url())
        .await
        .unwrap_or_else(|e| {
            panic!(
                "no container engine at {}: {e} (scripts/podman-setup.sh sets one up; \
                 SUNDIAL_SKIP_CONTAINER_TESTS=1 skips these tests)",
                engine_url()
            )
        })
}

fn docker() -> Docker {
    let url = engine_url();
    let path = url.strip_prefix("unix://").expect("a unix:// engine URL");
    Docker::connect_with_unix(path, 30, bollard::API_DEFAULT_VERSION).unwrap()
}

fn spec(image: &str, script: &str, permanent_exit_codes: Vec<i64>) -> TargetSpec {
    TargetSpec::Container(ContainerSpec {
        connection: "engine".into(),
        image: image.into(),
        command: vec!["sh".into(), "-c".into(), script.into()],
        env: BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())]),
        permanent_exit_codes,
    })
}

/// Waits until no container of `execution_id` is left on the engine.
async fn assert_removed(execution_id: &str) {
    let docker = docker();
    let mut last = String::new();
    for _ in 0..100 {
        let options = bollard::query_parameters::ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&std::collections::HashMap::from([(
                "label",
                vec![format!("sundial.execution-id={execution_id}")],
            )]))
            .build();
        // Podman's list can fail while another test's container is being
        // removed ("no such container"); that is a race in the listing, not
        // an answer, so it is retried like a non-empty list.
        match docker.list_containers(Some(options)).await {
            Ok(found) if found.is_empty() => return,
            Ok(found) => last = format!("still listed: {:?}", found.len()),
            Err(e) => last = format!("listing failed: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the container of {execution_id} was not removed ({last})");
}

#[tokio::test]
async fn exit_zero_succeeds_with_the_sundial_environment_and_the_output() {
    if skipped() {
        return;
    }
    let target = target().await;
    let id = execution_id();
    let spec = spec(
        IMAGE,
        "echo out; echo err >&2; env | grep -E '^(SUNDIAL_|GREETING)' | sort",
        vec![],
    );
    let outcome = target.dispatch(&delivery(&id, 2, &spec)).await.unwrap();
    assert_eq!(outcome.status_code, Some(0));
    let logs = outcome.detail.unwrap();
    for line in [
        "out".to_owned(),
        "err".to_owned(),
        "GREETING=hello".to_owned(),
        format!("SUNDIAL_EXECUTION_ID={id}"),
        "SUNDIAL_ATTEMPT=2".to_owned(),
        format!("SUNDIAL_SCHEDULED_AT={}", common::SCHEDULED_AT),
    ] {
        assert!(logs.lines().any(|l| l == line), "{line:?} not in {logs:?}");
    }
    assert_removed(&id).await;
}

#[tokio::test]
async fn an_exit_code_listed_as_permanent_fails_for_good() {
    if skipped() {
        return;
    }
    let target = target().await;
    let id = execution_id();
    let spec = spec(IMAGE, "echo bad input; exit 3", vec![3, 4]);
    let e = target.dispatch(&delivery(&id, 1, &spec)).await.unwrap_err();
    assert!(!e.is_retryable(), "{e:?}");
    assert_eq!(e.status_code(), Some(3));
    assert!(e.message().contains("bad input"), "{e}");
    assert_removed(&id).await;
}

#[tokio::test]
async fn another_exit_code_is_transient() {
    if skipped() {
        return;
    }
    let target = target().await;
    let id = execution_id();
    let spec = spec(IMAGE, "echo flaky; exit 1", vec![3]);
    let e = target.dispatch(&delivery(&id, 1, &spec)).await.unwrap_err();
    assert!(e.is_retryable(), "{e:?}");
    assert_eq!(e.status_code(), Some(1));
    assert!(e.message().contains("flaky"), "{e}");
    assert_removed(&id).await;
}

#[tokio::test]
async fn a_missing_image_fails_for_good() {
    if skipped() {
        return;
    }
    let target = target().await;
    let spec = spec("localhost/sundial-no-such-image:test", "true", vec![]);
    let e = target
        .dispatch(&delivery(&execution_id(), 1, &spec))
        .await
        .unwrap_err();
    assert!(!e.is_retryable(), "{e:?}");
    assert!(e.message().contains("image not found"), "{e}");
}

#[tokio::test]
async fn only_the_last_4_kib_of_output_are_kept() {
    if skipped() {
        return;
    }
    let target = target().await;
    let spec = spec(
        IMAGE,
        "i=0; while [ $i -lt 200 ]; do echo line-$i-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; i=$((i+1)); done; echo END",
        vec![],
    );
    let outcome = target
        .dispatch(&delivery(&execution_id(), 1, &spec))
        .await
        .unwrap();
    let logs = outcome.detail.unwrap();
    assert!(logs.len() <= LOG_TAIL_BYTES, "{}", logs.len());
    assert!(logs.len() > LOG_TAIL_BYTES - 100, "{}", logs.len());
    assert!(logs.ends_with("END\n"), "{logs:?}");
    assert!(!logs.contains("line-0-"), "the head should be cut");
}

#[tokio::test]
async fn a_dropped_dispatch_removes_its_container() {
    if skipped() {
        return;
    }
    let target = target().await;
    let id = execution_id();
    let spec = spec(IMAGE, "sleep 60", vec![]);
    let d = delivery(&id, 1, &spec);
    let cut = tokio::time::timeout(Duration::from_secs(2), target.dispatch(&d)).await;
    assert!(cut.is_err(), "the container should still be running");
    assert_removed(&id).await;
}
