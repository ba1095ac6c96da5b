//! The web UI in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`, which scripts/services.sh installs) driven over WebDriver against a real
//! `sundial server` process and a real loopback HTTP receiver. It walks every page and every
//! action: pause and resume a job, trigger it and see the execution appear on the open page
//! without a reload, cancel a backfill from the job's page, cancel a running execution,
//! re-drive a dead letter, cancel and retry a workflow run.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::{Receiver, Server, whole_second_after};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

/// A `chromedriver` child process on a free port, killed on drop, with the temporary
/// directory it and its Chromium write to (their `TMPDIR`: the profile, the `scoped_dir`
/// copies), removed on drop, so a run leaves nothing in /tmp.
struct Driver {
    child: Child,
    url: String,
    _tmp: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn browser() -> (Driver, Client) {
    // The WebDriver client's TLS stack (unused on loopback) needs a process-wide provider.
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let tmp = tempfile::tempdir().expect("a temporary directory for Chromium");
    let child = Command::new("chromedriver")
        .arg(format!("--port={port}"))
        .env("TMPDIR", tmp.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromedriver (Debian's chromium-driver) is installed");
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
        _tmp: tmp,
    };
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900"]}),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let client = loop {
        match ClientBuilder::rustls()
            .expect("a TLS-capable WebDriver client")
            .capabilities(caps.clone())
            .connect(&driver.url)
            .await
        {
            Ok(c) => break c,
            Err(e) if tokio::time::Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot start a Chromium session: {e}"),
        }
    };
    (driver, client)
}

/// The page's visible text; empty while the page is being replaced (a navigation or an
/// htmx swap between finding the body and reading it).
async fn text(c: &Client) -> String {
    match c.find(Locator::Css("body")).await {
        Ok(body) => body.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// Waits up to `secs` for the page (as it is, without reloading) to show `needle`.
async fn wait_for_text(c: &Client, needle: &str, secs: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let t = text(c).await;
        if t.contains(needle) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "'{needle}' did not appear: {t}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Clicks the button labelled `label`, waiting up to 10 s for it (an htmx swap may still be
/// drawing it).
async fn click_button(c: &Client, label: &str) {
    c.wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&format!(
            "//button[normalize-space()='{label}']"
        )))
        .await
        .unwrap_or_else(|e| panic!("no button '{label}': {e}"))
        .click()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_and_action_works_in_chromium() {
    let receiver = Receiver::start().await;
    let server = Server::start().await;
    let base = format!("http://{}", server.addr);
    server
        .put_job(
            "e2e",
            "browse",
            json!({"schedule": {"cron": "0 3 * * *", "timezone": "Europe/Berlin"},
                   "description": "<script>document.title='owned'</script>",
                   "target": {"type": "http", "url": receiver.url("ok")}}),
        )
        .await;
    server
        .put_job(
            "e2e",
            "slow",
            json!({"schedule": {"cron": "0 3 * * *"}, "target": {"type": "http", "url": receiver.url("slow")}}),
        )
        .await;
    let at = whole_second_after(Duration::from_secs(1));
    server
        .put_job(
            "e2e",
            "down",
            json!({"schedule": {"at": at.to_string()}, "target": {"type": "http", "url": receiver.url("unavailable")},
                   "retry": {"max_attempts": 1}}),
        )
        .await;
    server
        .put_workflow(
            "e2e",
            "flow",
            json!({"tasks": [
                {"name": "first", "target": {"type": "http", "url": receiver.url("slow-first")}},
                {"name": "second", "depends_on": ["first"], "target": {"type": "http", "url": receiver.url("ok")}}
            ]}),
        )
        .await;
    let (_driver, c) = browser().await;

    // Overview → namespace → jobs → a job: the schedule in words, the description escaped.
    c.goto(&format!("{base}/ui/")).await.unwrap();
    c.find(Locator::LinkText("e2e"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_text(&c, "at 03:00, every day (Europe/Berlin)", 5).await;
    c.find(Locator::LinkText("browse"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_text(&c, "<script>document.title='owned'</script>", 5).await;
    assert_ne!(
        c.title().await.unwrap(),
        "owned",
        "the description ran as a script"
    );

    // Pause and resume.
    click_button(&c, "pause").await;
    wait_for_text(&c, "paused", 5).await;
    click_button(&c, "resume").await;
    wait_for_text(&c, "active", 5).await;

    // A trigger made elsewhere appears on the open page without a reload (htmx polling).
    assert!(!text(&c).await.contains("manual"));
    let (status, _) = server
        .request(
            reqwest::Method::POST,
            "/v1/namespaces/e2e/jobs/browse/trigger",
            None,
        )
        .await;
    assert_eq!(status, 201);
    wait_for_text(&c, "manual", 10).await;
    // And the page's own trigger button.
    click_button(&c, "trigger").await;
    wait_for_text(&c, "succeeded", 10).await;

    // A backfill is listed on the job's page, and its cancel button stops it through the API.
    let to = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
    let from = to - jiff::SignedDuration::from_hours(24 * 30);
    let (status, backfill) = server
        .request(
            reqwest::Method::POST,
            "/v1/namespaces/e2e/jobs/browse/backfill",
            Some(json!({"from": from, "to": to, "max_per_second": 1})),
        )
        .await;
    assert_eq!(status, 202, "{backfill}");
    c.goto(&format!("{base}/ui/namespaces/e2e/jobs/browse"))
        .await
        .unwrap();
    wait_for_text(&c, "Backfills", 5).await;
    click_button(&c, "cancel").await;
    wait_for_text(&c, "cancelled", 10).await;
    let id = backfill["id"].as_str().unwrap();
    let after = server
        .get(&format!("/v1/namespaces/e2e/jobs/browse/backfills/{id}"))
        .await;
    assert_eq!(after["state"], "cancelled", "{after}");

    // Cancel a running execution from its page.
    let (_, exec) = server
        .request(
            reqwest::Method::POST,
            "/v1/namespaces/e2e/jobs/slow/trigger",
            None,
        )
        .await;
    let id = exec["id"].as_str().unwrap().to_owned();
    server
        .wait_for(Duration::from_secs(10), async || {
            (server.execution("e2e", &id).await["state"] == "running").then_some(())
        })
        .await;
    c.goto(&format!("{base}/ui/namespaces/e2e/executions/{id}"))
        .await
        .unwrap();
    click_button(&c, "cancel").await;
    wait_for_text(&c, "cancelled", 10).await;

    // Re-drive the dead letter: select it, send the form.
    server
        .wait_for(Duration::from_secs(15), async || {
            server
                .history("e2e", "down")
                .await
                .into_iter()
                .find(|e| e["state"] == "dead")
        })
        .await;
    c.goto(&format!("{base}/ui/namespaces/e2e/dead-letters"))
        .await
        .unwrap();
    wait_for_text(&c, "1 dead letters", 5).await;
    c.find(Locator::Css("input[type=checkbox][name=id]"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    click_button(&c, "Re-drive selected").await;
    wait_for_text(&c, "1 re-driven.", 5).await;

    // A workflow: trigger from its grid, cancel the run from its page, then retry it.
    c.goto(&format!("{base}/ui/namespaces/e2e/workflows"))
        .await
        .unwrap();
    c.find(Locator::LinkText("flow"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    click_button(&c, "trigger").await;
    // The trigger answers with the grid re-drawn; wait for it rather than read the old one.
    let run_link = c
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("a[href*='/ui/namespaces/e2e/runs/']"))
        .await
        .expect("the run appears in the grid");
    run_link.click().await.unwrap();
    assert!(
        c.wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("svg rect"))
            .await
            .is_ok(),
        "the DAG is drawn"
    );
    click_button(&c, "cancel run").await;
    wait_for_text(&c, "cancelled", 10).await;
    click_button(&c, "retry failed tasks").await;
    wait_for_text(&c, "running", 10).await;

    // The cluster page: this node, and the shard map.
    c.goto(&format!("{base}/ui/cluster")).await.unwrap();
    wait_for_text(&c, "test", 5).await;
    let cells = c.find_all(Locator::Css(".shards span")).await.unwrap();
    assert_eq!(cells.len(), 1024);
    c.close().await.unwrap();
}
