//! PostgreSQL over TLS (docs/configuration.md, "database_url"): a PostgreSQL of the test's own,
//! started with `ssl = on` and a certificate made in the test by a CA made in the test, its
//! `pg_hba.conf` refusing every connection without TLS. The store connects with
//! `sslmode=verify-full` and the CA from `sslrootcert`; a CA that did not sign the server's
//! certificate is refused with an error that names the certificate; a role that may only log
//! in with a client certificate logs in with `sslcert` and `sslkey` and is refused without.
//!
//! The server runs as the `postgres` system user when the test runs as root (initdb refuses
//! root), from PostgreSQL's server binaries (`server_bindir`); the certificates are made
//! with the `openssl` command.

use std::path::{Path, PathBuf};
use std::process::Command;

use sundial_store::prelude::*;
use sundial_store_postgres::PgStore;

/// Runs `program` with `args`, as `user` when given (through `runuser`); panics with its
/// output when it fails.
fn run(user: Option<&str>, program: &str, args: &[&str]) {
    let mut cmd = match user {
        Some(u) => {
            let mut c = Command::new("runuser");
            c.args(["-u", u, "--", program]);
            c
        }
        None => Command::new(program),
    };
    let out = cmd
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `openssl` with `args`, in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A certificate authority `name` (`name.crt`, `name.key`) in `dir`.
fn make_ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            &format!("/CN={name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
        ],
    );
}

/// A certificate `name` (`name.crt`, `name.key`) for the common name `cn`, with
/// `san` as its subject alternative names when given, signed by the CA `ca`.
fn make_cert(dir: &Path, ca: &str, name: &str, cn: &str, san: Option<&str>) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={cn}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ],
    );
    let ext = dir.join(format!("{name}.ext"));
    std::fs::write(
        &ext,
        // Extensions make it an X.509 v3 certificate, the only version rustls accepts.
        format!(
            "basicConstraints=CA:FALSE\n{}",
            san.map(|s| format!("subjectAltName={s}\n"))
                .unwrap_or_default()
        ),
    )
    .expect("ext");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-out",
            &format!("{name}.crt"),
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
}

/// Where PostgreSQL's server binaries are: `pg_config --bindir`, else the newest
/// `/usr/lib/postgresql/N/bin` (Debian's layout, where `pg_config` comes with `libpq-dev`).
fn server_bindir() -> PathBuf {
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|d| d.join("initdb").exists());
    from_pg_config.unwrap_or_else(|| {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's server binaries: no pg_config and no /usr/lib/postgresql")
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let v = e.file_name().to_string_lossy().parse::<u32>().ok()?;
                Some((v, e.path().join("bin")))
            })
            .filter(|(_, bin)| bin.join("initdb").exists())
            .collect();
        versions.sort();
        versions
            .pop()
            .expect("an initdb under /usr/lib/postgresql/N/bin")
            .1
    })
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// A PostgreSQL server of the test's own on `port`, stopped on drop.
struct TlsServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    user: Option<&'static str>,
    port: u16,
}

impl TlsServer {
    fn start() -> TlsServer {
        let bin = server_bindir();
        let user = is_root().then_some("postgres");
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        make_ca(d, "ca");
        make_ca(d, "other-ca");
        make_cert(
            d,
            "ca",
            "server",
            "localhost",
            Some("DNS:localhost,IP:127.0.0.1"),
        );
        make_cert(d, "ca", "client", "sundial_cert", None);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        if let Some(u) = user {
            run(None, "chown", &["-R", u, &d.to_string_lossy()]);
        }
        run(
            None,
            "chmod",
            &["600", &d.join("server.key").to_string_lossy()],
        );
        let data = d.join("data");
        let data_s = data.to_string_lossy().into_owned();
        run(
            user,
            &bin.join("initdb").to_string_lossy(),
            &[
                "-D",
                &data_s,
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
            ],
        );
        let conf = format!(
            "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             ssl = on\nssl_cert_file = '{}'\nssl_key_file = '{}'\nssl_ca_file = '{}'\n",
            d.display(),
            d.join("server.crt").display(),
            d.join("server.key").display(),
            d.join("ca.crt").display(),
        );
        append(&data.join("postgresql.conf"), &conf);
        // TLS only: a client certificate for `sundial_cert`, trust for the rest; nothing
        // without TLS.
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             hostssl all sundial_cert 127.0.0.1/32 cert\n\
             hostssl all all 127.0.0.1/32 trust\n\
             hostnossl all all 127.0.0.1/32 reject\n",
        )
        .expect("pg_hba.conf");
        if let Some(u) = user {
            run(None, "chown", &["-R", u, &data_s]);
        }
        let log = d.join("server.log").to_string_lossy().into_owned();
        run(
            user,
            &bin.join("pg_ctl").to_string_lossy(),
            &["-D", &data_s, "-l", &log, "-w", "start"],
        );
        let server = TlsServer {
            dir,
            bin,
            user,
            port,
        };
        run(
            user,
            &server.bin.join("psql").to_string_lossy(),
            &[
                "-h",
                &server.dir.path().to_string_lossy(),
                "-p",
                &port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-c",
                "CREATE ROLE sundial_cert LOGIN SUPERUSER",
            ],
        );
        server
    }

    fn path(&self, file: &str) -> String {
        self.dir.path().join(file).to_string_lossy().into_owned()
    }

    fn url(&self, user: &str, query: &str) -> String {
        format!("postgres://{user}@localhost:{}/postgres?{query}", self.port)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let data = self.dir.path().join("data").to_string_lossy().into_owned();
        let _ = Command::new("runuser")
            .args(["-u", self.user.unwrap_or("root"), "--"])
            .arg(self.bin.join("pg_ctl"))
            .args(["-D", &data, "-m", "immediate", "stop"])
            .output();
    }
}

fn append(file: &Path, text: &str) {
    use std::io::Write as _;
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(file)
        .expect("postgresql.conf");
    f.write_all(text.as_bytes()).expect("write");
}

#[tokio::test]
async fn the_store_connects_over_tls_verifying_the_server_and_refuses_a_wrong_ca() {
    let server = TlsServer::start();

    // verify-full with the CA that signed the server's certificate: the store opens, migrates
    // and answers, over TLS.
    let url = server.url(
        "postgres",
        &format!("sslmode=verify-full&sslrootcert={}", server.path("ca.crt")),
    );
    let store = PgStore::open(&url, None)
        .await
        .expect("verify-full with the right CA");
    store.now().await.expect("the store answers");
    let pool = sqlx::PgPool::connect(&url).await.expect("pool");
    let ssl: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&pool)
        .await
        .expect("pg_stat_ssl");
    assert!(ssl, "the session is encrypted");
    pool.close().await;

    // A CA that did not sign it: refused, the error naming the certificate.
    let wrong = server.url(
        "postgres",
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            server.path("other-ca.crt")
        ),
    );
    let err = PgStore::open(&wrong, None)
        .await
        .expect_err("a certificate the CA did not sign is refused");
    // What `sundial server` prints: the error and its causes, as anyhow's `{:#}` does.
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        text.push_str(&format!(": {c}"));
        cause = c.source();
    }
    eprintln!("wrong CA refused: {text}");
    assert!(
        text.to_lowercase().contains("certificate") && !text.contains("BEGIN"),
        "the error names the certificate: {text}"
    );

    // Without TLS the server refuses the session (pg_hba.conf: hostnossl reject).
    let plain = server.url("postgres", "sslmode=disable");
    assert!(
        PgStore::open(&plain, None).await.is_err(),
        "no session without TLS"
    );
}

#[tokio::test]
async fn a_client_certificate_from_the_url_logs_in_where_the_server_asks_for_one() {
    let server = TlsServer::start();
    let with_cert = server.url(
        "sundial_cert",
        &format!(
            "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            server.path("ca.crt"),
            server.path("client.crt"),
            server.path("client.key")
        ),
    );
    let store = PgStore::open(&with_cert, None)
        .await
        .expect("the client certificate logs in");
    store.now().await.expect("the store answers");
    let without = server.url(
        "sundial_cert",
        &format!("sslmode=verify-full&sslrootcert={}", server.path("ca.crt")),
    );
    assert!(
        PgStore::open(&without, None).await.is_err(),
        "the same role without its certificate is refused"
    );
}
