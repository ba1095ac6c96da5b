//! The HTTP target's unit tests: classification, request building, `Retry-After`, error bodies.

#[test]
fn an_error_body_is_shown_on_one_line_cut_to_its_limit() {
    let page = "<html>\n  <head><title>502 Bad Gateway</title></head>\n<body>\r\n\t<h1>Bad</h1>\n</body>\n</html>\n";
    assert_eq!(
        one_line(page, 256),
        "<html> <head><title>502 Bad Gateway</title></head> <body> <h1>Bad</h1> </body> </html>"
    );
    let long = "word ".repeat(200);
    let cut = one_line(&long, 256);
    assert!(cut.ends_with('…') && !cut.contains('\n'), "{cut}");
    assert!(cut.chars().count() <= 256, "{cut}");
    assert_eq!(one_line("  \n ", 256), "");
}

use super::*;

#[test]
fn status_classes_follow_the_spec_table() {
    use StatusClass::*;
    for (status, class) in [
        (200, Success),
        (204, Success),
        (301, Permanent),
        (400, Permanent),
        (401, Permanent),
        (404, Permanent),
        (408, Transient),
        (409, Permanent),
        (425, Transient),
        (429, Transient),
        (500, Transient),
        (503, Transient),
        (599, Transient),
    ] {
        assert_eq!(classify_http_status(status, &[]), class, "{status}");
    }
    assert_eq!(classify_http_status(202, &[201]), Permanent);
    assert_eq!(classify_http_status(409, &[409]), Success);
}

#[test]
fn target_urls_are_parsed_once_and_the_set_stays_bounded() {
    let target = HttpTarget::new().unwrap();
    let url = "http://127.0.0.1:9/hook?x=1";
    let urls = |t: &HttpTarget| t.known.lock().unwrap().urls.len();
    assert_eq!(target.parsed(url).unwrap().0.as_str(), url);
    assert_eq!(
        target.parsed(url).unwrap().0.as_str(),
        url,
        "read from the set"
    );
    assert_eq!(urls(&target), 1);
    for i in 0..PARSED_URLS + 10 {
        target.parsed(&format!("http://h{i}.example/")).unwrap();
    }
    assert!((1..=PARSED_URLS).contains(&urls(&target)), "URLs held");
    let hosts = target.known.lock().unwrap().hosts.len();
    assert!((1..=PARSED_URLS).contains(&hosts), "{hosts} hosts held");
    let bad = target.parsed("not a url").unwrap_err();
    assert!(bad.contains("not a url"), "{bad}");
    target.known.lock().unwrap().urls.clear();
    let long = format!("http://127.0.0.1/{}", "a".repeat(PARSED_URL_MAX_LEN));
    assert_eq!(target.parsed(&long).unwrap().0.as_str(), long);
    assert_eq!(urls(&target), 0, "too long to keep");
}

#[test]
fn urls_of_one_origin_share_its_count_and_other_origins_do_not() {
    let target = HttpTarget::new().unwrap();
    let (_, a) = target.parsed("http://example.com/a").unwrap();
    let (_, b) = target.parsed("http://example.com:80/b?x=1").unwrap();
    let (_, c) = target.parsed("https://example.com/a").unwrap();
    let (_, d) = target.parsed("http://example.com:8080/a").unwrap();
    assert!(Arc::ptr_eq(&a, &b), "the same scheme, host and port");
    assert!(!Arc::ptr_eq(&a, &c), "another scheme");
    assert!(!Arc::ptr_eq(&a, &d), "another port");
    assert_eq!(
        a.slots.available_permits(),
        DEFAULT_MAX_CONNECTIONS_PER_HOST
    );
}

/// A loopback HTTP receiver answering every request `200 OK`; yields each request's head
/// (request line and headers), lower-cased.
async fn receiver() -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let (addr, received, _) = receiver_answering("").await;
    (addr, received)
}

/// Like [`receiver`], answering with `body`; also counts the connections accepted.
async fn receiver_answering(
    body: &'static str,
) -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<String>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    serve(body, false).await
}

/// Like [`receiver_answering`]; with `close`, each connection is closed after its first
/// answer, as a receiver whose keep-alive timeout has passed closes an idle one.
async fn serve(
    body: &'static str,
    close: bool,
) -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<String>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (heads, received) = tokio::sync::mpsc::unbounded_channel();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accepted = connections.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            accepted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let heads = heads.clone();
            tokio::spawn(async move {
                let mut read = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    if let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = read.drain(..end + 4).collect();
                        let _ = heads.send(String::from_utf8_lossy(&head).to_lowercase());
                        let ok = format!(
                            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(ok.as_bytes()).await.is_err() || close {
                            return;
                        }
                        continue;
                    }
                    match stream.read(&mut buf).await {
                        Ok(n) if n > 0 => read.extend_from_slice(&buf[..n]),
                        _ => return,
                    }
                }
            });
        }
    });
    (addr, received, connections)
}

#[tokio::test]
async fn a_post_without_a_body_says_content_length_0_and_a_get_says_nothing() {
    let (addr, mut received) = receiver().await;
    let target = HttpTarget::new().unwrap();
    for (method, expected) in [
        ("POST", true),
        ("PUT", true),
        ("GET", false),
        ("DELETE", false),
    ] {
        let mut spec = get(format!("http://{addr}/hook"));
        if let TargetSpec::Http(h) = &mut spec {
            h.method = method.into();
        }
        target.dispatch(&delivery(&spec)).await.unwrap();
        let head = received.recv().await.unwrap();
        assert_eq!(
            head.contains("content-length: 0\r\n"),
            expected,
            "{method}: {head}"
        );
    }
}

#[tokio::test]
async fn a_success_with_a_body_keeps_the_connection_for_the_next_attempt() {
    // Larger than one read of the socket, so the client must read on for the body's end.
    let body: &'static str = Box::leak("x".repeat(300_000).into_boxed_str());
    let (addr, mut received, connections) = receiver_answering(body).await;
    let spec = get(format!("http://{addr}/hook"));
    let target = HttpTarget::new().unwrap();
    for _ in 0..3 {
        target.dispatch(&delivery(&spec)).await.unwrap();
        received.recv().await.unwrap();
        // The body is read off the attempt's path; give it time to reach its end (on
        // loopback it takes well under a millisecond).
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_connection_the_receiver_closed_while_idle_is_not_used_again() {
    let (addr, mut received, connections) = serve("", true).await;
    let spec = get(format!("http://{addr}/hook"));
    let target = HttpTarget::new().unwrap();
    for round in 1..=3 {
        target
            .dispatch(&delivery(&spec))
            .await
            .unwrap_or_else(|e| panic!("attempt {round}: {e}"));
        received.recv().await.unwrap();
        // Time for the receiver's end of the connection to reach the client.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 3);
    // And at once, without the pause: the closed connection may be taken before its end
    // is seen, and the request then goes on a new one.
    for round in 1..=20 {
        target
            .dispatch(&delivery(&spec))
            .await
            .unwrap_or_else(|e| panic!("attempt {round} without a pause: {e}"));
    }
}

#[tokio::test]
async fn a_body_not_read_to_its_end_closes_its_connection() {
    // Far larger than a task keeps as output, so reading it stops well before its end.
    let body: &'static str = Box::leak("7".repeat(4 * MAX_OUTPUT_BYTES).into_boxed_str());
    let (addr, _received, connections) = receiver_answering(body).await;
    let spec = get(format!("http://{addr}/hook"));
    let target = HttpTarget::new().unwrap();
    let keeping = Delivery {
        keep_output: true,
        ..delivery(&spec)
    };
    for _ in 0..2 {
        let err = target.dispatch(&keeping).await.unwrap_err();
        assert!(
            matches!(&err, Error::Permanent { message, .. } if message.contains("larger than")),
            "{err:?}"
        );
    }
    let (_, host) = target.parsed(&format!("http://{addr}/hook")).unwrap();
    assert_eq!(host.idle.len(), 0, "no connection went back half read");
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[test]
fn a_url_parsed_again_after_its_host_was_forgotten_counts_with_the_host() {
    let target = HttpTarget::new().unwrap();
    let url = "http://example.com/a";
    target.parsed(url).unwrap();
    // Enough other hosts that the idle ones, example.com among them, are forgotten, by
    // URLs too long to be kept, so that only the hosts fill up.
    let path = "p".repeat(PARSED_URL_MAX_LEN);
    for i in 0..PARSED_URLS {
        target
            .parsed(&format!("http://h{i}.example/{path}"))
            .unwrap();
    }
    let (_, cached) = target.parsed(url).unwrap();
    // Too long to be kept, so it is always counted through the hosts.
    let long = format!("http://example.com/{}", "a".repeat(PARSED_URL_MAX_LEN));
    let (_, uncached) = target.parsed(&long).unwrap();
    assert!(Arc::ptr_eq(&cached, &uncached), "one count for example.com");
}

/// Sends `count` attempts to `url` at once through `target`; panics if one fails.
async fn at_once(target: &HttpTarget, url: String, count: usize) {
    let mut attempts = tokio::task::JoinSet::new();
    for _ in 0..count {
        let (target, spec) = (target.clone(), get(url.clone()));
        attempts.spawn(async move { target.dispatch(&delivery(&spec)).await.map(|_| ()) });
    }
    while let Some(done) = attempts.join_next().await {
        done.unwrap().unwrap();
    }
}

/// With empty response bodies, which the pool takes back at once (a body read to its end
/// can let one more connection open in the moment before the pool has it back).
#[tokio::test]
async fn no_more_than_max_connections_per_host_are_opened_to_a_host() {
    let accepted =
        |c: &Arc<std::sync::atomic::AtomicUsize>| c.load(std::sync::atomic::Ordering::SeqCst);
    let capped = HttpTarget::with_options(HttpOptions {
        allow: None,
        max_connections_per_host: 3,
    })
    .unwrap();
    let (one, _heads_one, to_one) = receiver_answering("").await;
    let (two, _heads_two, to_two) = receiver_answering("").await;
    at_once(&capped, format!("http://{one}/hook"), 40).await;
    at_once(&capped, format!("http://{two}/hook"), 40).await;
    assert!(
        (1..=3).contains(&accepted(&to_one)),
        "{}",
        accepted(&to_one)
    );
    assert!(
        (1..=3).contains(&accepted(&to_two)),
        "each host has its own count"
    );

    // The same 40 at once without the cap open a connection each.
    let open = HttpTarget::with_options(HttpOptions {
        allow: None,
        max_connections_per_host: 1_000,
    })
    .unwrap();
    let (three, _heads_three, to_three) = receiver_answering("").await;
    at_once(&open, format!("http://{three}/hook"), 40).await;
    assert!(accepted(&to_three) > 3, "{}", accepted(&to_three));
}

#[tokio::test]
async fn credentials_in_the_url_are_sent_as_basic_auth_and_not_in_the_request_line() {
    let (addr, mut received) = receiver().await;
    let spec = get(format!("http://alice:s3cret@{addr}/hook"));
    let target = HttpTarget::new().unwrap();
    // The second time, the URL comes from the set of parsed URLs.
    for _ in 0..2 {
        target.dispatch(&delivery(&spec)).await.unwrap();
        let head = received.recv().await.unwrap();
        // base64("alice:s3cret"), lower-cased with the rest of the head.
        assert!(
            head.contains("authorization: basic ywxpy2u6cznjcmv0"),
            "{head}"
        );
        assert!(head.starts_with("get /hook http/1.1"), "{head}");
        assert!(!head.contains("s3cret"), "{head}");
    }
}

fn get(url: String) -> TargetSpec {
    TargetSpec::Http(sundial_core::job::HttpTarget {
        method: "GET".into(),
        url,
        headers: Default::default(),
        body: None,
        success_codes: Vec::new(),
    })
}

fn delivery(spec: &TargetSpec) -> Delivery<'_> {
    Delivery {
        execution_id: "0193a5c4-0000-7000-8000-000000000001",
        namespace: "default",
        attempt: 1,
        lease_until: None,
        signature: None,
        scheduled_at: Timestamp::UNIX_EPOCH,
        now: Timestamp::UNIX_EPOCH,
        target: spec,
        keep_output: false,
    }
}

fn allowing(patterns: &[&str]) -> HttpTarget {
    let list = HostAllowList::parse(patterns).unwrap();
    HttpTarget::with_options(HttpOptions {
        allow: Some(Arc::new(list)),
        ..HttpOptions::default()
    })
    .unwrap()
}

#[tokio::test]
async fn an_allow_list_lets_through_only_the_hosts_and_addresses_it_holds() {
    let (addr, mut received) = receiver().await;
    let port = addr.port();
    // By address literal, by name, and by the name's resolved address.
    for (patterns, url) in [
        (&["127.0.0.0/8"][..], format!("http://{addr}/a")),
        (&["localhost"][..], format!("http://localhost:{port}/b")),
        (&["127.0.0.1"][..], format!("http://localhost:{port}/c")),
    ] {
        let spec = get(url.clone());
        allowing(patterns)
            .dispatch(&delivery(&spec))
            .await
            .unwrap_or_else(|e| panic!("{patterns:?} {url}: {e}"));
        let head = received.recv().await.unwrap();
        assert!(
            head.starts_with(&format!("get /{} ", &url[url.len() - 1..])),
            "{head}"
        );
    }
    // Refused before any connection: the literal, and a name only a name pattern could allow.
    for (patterns, url) in [
        (&["10.0.0.0/8"][..], format!("http://{addr}/")),
        (&["*.internal"][..], format!("http://localhost:{port}/")),
    ] {
        let spec = get(url.clone());
        let err = allowing(patterns)
            .dispatch(&delivery(&spec))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Permanent { message, .. } if message.contains("is not in the [http_targets] allow list")),
            "{patterns:?} {url}: {err:?}"
        );
    }
    // A name that resolves outside the networks: refused at resolution, as permanent.
    let spec = get(format!("http://localhost:{port}/"));
    let err = allowing(&["10.0.0.0/8"])
        .dispatch(&delivery(&spec))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Permanent { message, .. } if message.contains("no address of 'localhost'")),
        "{err:?}"
    );
    assert!(received.try_recv().is_err(), "a refused host got a request");
}

#[test]
fn retry_after_reads_seconds_and_http_dates() {
    let now: Timestamp = "2015-10-21T07:28:00Z".parse().unwrap();
    let mut h = HeaderMap::new();
    h.insert(RETRY_AFTER, HeaderValue::from_static("120"));
    assert_eq!(retry_after(&h, now), Some(Dur::from_secs(120)));
    h.insert(
        RETRY_AFTER,
        HeaderValue::from_static("Wed, 21 Oct 2015 07:28:30 GMT"),
    );
    assert_eq!(retry_after(&h, now), Some(Dur::from_secs(30)));
    h.insert(RETRY_AFTER, HeaderValue::from_static("soon"));
    assert_eq!(retry_after(&h, now), None);
}
