//! TLS (-Z with -o ssl_chain_cert/ssl_key/...) and ASCII authentication (-Y) as memcached
//! does them for the text protocol, with real clients: pymemcache over TLS, `openssl
//! s_client`, and client-certificate verification (ssl_verify_mode=2); a `notls:` listener
//! beside a TLS one; auth before anything else, failures counted, SIGHUP reloading the file.
mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{connect_to, roundtrip, scratch_dir, Server};

fn sh(dir: &Path, cmd: &str) {
    let out = Command::new("sh")
        .args(["-c", cmd])
        .current_dir(dir)
        .output()
        .expect("sh");
    assert!(
        out.status.success(),
        "{cmd}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1 signed by it, and a client certificate.
fn make_certs(dir: &Path) {
    sh(
        dir,
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 \
         -subj /CN=flashtier-test-ca 2>/dev/null && \
         openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
         -subj /CN=localhost 2>/dev/null && \
         printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nbasicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > server.ext && \
         openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
         -out server.pem -days 2 -extfile server.ext 2>/dev/null && \
         openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr \
         -subj /CN=client 2>/dev/null && \
         printf 'basicConstraints=CA:FALSE\\nextendedKeyUsage=clientAuth\\n' > client.ext && \
         openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
         -out client.pem -days 2 -extfile client.ext 2>/dev/null",
    );
}

/// `openssl s_client` sending `input`; returns (exit status ok, stdout).
fn s_client(port: u16, dir: &Path, extra: &[&str], input: &str) -> (bool, String) {
    let mut child = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-quiet",
        ])
        .args(["-CAfile", "ca.pem", "-verify_return_error"])
        .args(extra)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("openssl");
    use std::io::Write as _;
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn python(script: &str) -> String {
    let out = Command::new("python3")
        .args(["-c", script])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{script}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn tls_with_pymemcache_and_openssl() {
    let dir = scratch_dir("tls");
    make_certs(&dir);
    let d = dir.display();
    // A TLS listener (the harness's --listen) and a plain one (`notls:`).
    let plain = std::net::TcpListener::bind("127.0.0.1:0").expect("probe");
    let plain_port = plain.local_addr().expect("addr").port();
    drop(plain);
    let notls = format!("notls:127.0.0.1:{plain_port}");
    let opts = format!("ssl_chain_cert={d}/server.pem,ssl_key={d}/server.key,ssl_session_cache");
    let server = Server::start(&["-Z", "-o", &opts, "-l", &notls]);
    let port = server.addr.port();
    let got = python(&format!(
        "import ssl\n\
         from pymemcache.client.base import Client\n\
         ctx = ssl.create_default_context(cafile='{d}/ca.pem')\n\
         c = Client(('127.0.0.1', {port}), tls_context=ctx)\n\
         c.set('k', b'over tls')\n\
         print(c.get('k').decode())\n\
         print(c.version().decode())\n"
    ));
    assert_eq!(
        got.lines().collect::<Vec<_>>(),
        vec!["over tls", "1.6.18-flashtier-0.1.0"]
    );
    let (ok, out) = s_client(port, &dir, &[], "get k\r\nquit\r\n");
    assert!(ok, "{out}");
    assert!(out.contains("VALUE k 0 8\r\nover tls\r\nEND\r\n"), "{out}");
    // The notls listener speaks plain text to the same store.
    let mut c = connect_to(("127.0.0.1", plain_port));
    assert_eq!(
        roundtrip(&mut c, b"get k\r\n", b"END\r\n"),
        "VALUE k 0 8\r\nover tls\r\nEND\r\n"
    );
    let settings = roundtrip(&mut c, b"stats settings\r\n", b"END\r\n");
    assert!(settings.contains("STAT ssl_enabled yes\r\n"), "{settings}");
    let stats = roundtrip(&mut c, b"stats\r\n", b"END\r\n");
    assert!(stats.contains("STAT ssl_new_sessions "), "{stats}");
    // Plain text on the TLS port is a failed handshake, counted.
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    use std::io::{Read as _, Write as _};
    raw.write_all(b"get k\r\n").expect("write");
    let mut sink = Vec::new();
    let _ = raw.read_to_end(&mut sink);
    assert!(!String::from_utf8_lossy(&sink).contains("VALUE"));
    drop(server);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn tls_client_certificates_and_minimum_version() {
    let dir = scratch_dir("tls-verify");
    make_certs(&dir);
    let d = dir.display();
    let opts = format!(
        "ssl_chain_cert={d}/server.pem,ssl_key={d}/server.key,ssl_ca_cert={d}/ca.pem,\
         ssl_verify_mode=2,ssl_min_version=tlsv1.3"
    );
    let server = Server::start(&["-Z", "-o", &opts]);
    let port = server.addr.port();
    let (ok, out) = s_client(port, &dir, &[], "version\r\nquit\r\n");
    assert!(
        !out.contains("VERSION"),
        "no client certificate, no service: {ok} {out}"
    );
    let (ok, out) = s_client(
        port,
        &dir,
        &["-cert", "client.pem", "-key", "client.key"],
        "version\r\nquit\r\n",
    );
    assert!(ok && out.contains("VERSION 1.6.18-flashtier-"), "{out}");
    let (_, out) = s_client(
        port,
        &dir,
        &["-cert", "client.pem", "-key", "client.key", "-tls1_2"],
        "version\r\nquit\r\n",
    );
    assert!(
        !out.contains("VERSION"),
        "TLS 1.2 refused with ssl_min_version=tlsv1.3"
    );
    drop(server);
    std::fs::remove_dir_all(&dir).expect("cleanup");
}

#[test]
fn ascii_auth_and_reload() {
    let dir = scratch_dir("auth");
    let auth = dir.join("auth");
    std::fs::write(&auth, "alice:secret\n").expect("write");
    let a = auth.to_str().expect("utf-8");
    let server = Server::start(&["-Y", a]);
    let mut c = server.connect();
    assert_eq!(
        roundtrip(&mut c, b"get k\r\n", b"\r\n"),
        "CLIENT_ERROR unauthenticated\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"set auth 0 0 12\r\nalice wrong!\r\n", b"\r\n"),
        "CLIENT_ERROR authentication failure\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"set auth 0 0 12\r\nalice secret\r\n", b"\r\n"),
        "STORED\r\n"
    );
    assert_eq!(
        roundtrip(&mut c, b"set k 0 0 1\r\nv\r\nmg k v\r\n", b"v\r\n"),
        "STORED\r\nVA 1\r\nv\r\n"
    );
    let stats = roundtrip(&mut c, b"stats\r\n", b"END\r\n");
    assert!(stats.contains("STAT auth_cmds 2\r\n"), "{stats}");
    assert!(stats.contains("STAT auth_errors 1\r\n"), "{stats}");
    // pymemcache authenticates the memcached way: a set whose value is "user pass".
    let port = server.addr.port();
    let got = python(&format!(
        "from pymemcache.client.base import Client\n\
         from pymemcache.exceptions import MemcacheClientError\n\
         c = Client(('127.0.0.1', {port}))\n\
         try:\n    c.get('k')\nexcept MemcacheClientError as e:\n    print('refused', e)\n\
         print(c.set('auth', 'alice secret', noreply=False))\n\
         print(c.get('k').decode())\n"
    ));
    assert_eq!(
        got.lines().collect::<Vec<_>>(),
        vec!["refused b'unauthenticated'", "True", "v"],
        "{got}"
    );
    // SIGHUP reloads the file: new connections see the new entries.
    std::fs::write(&auth, "bob:pw\n").expect("write");
    let pid = server.child.id().to_string();
    Command::new("kill")
        .args(["-HUP", &pid])
        .status()
        .expect("kill");
    let mut ok = false;
    for _ in 0..200 {
        let mut c = server.connect();
        if roundtrip(&mut c, b"set a 0 0 6\r\nbob pw\r\n", b"\r\n") == "STORED\r\n" {
            ok = true;
            assert_eq!(
                roundtrip(
                    &mut server.connect(),
                    b"set a 0 0 12\r\nalice secret\r\n",
                    b"\r\n"
                ),
                "CLIENT_ERROR authentication failure\r\n"
            );
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(ok, "SIGHUP did not reload the auth file");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
