//! The `bash` tool's confinement, attack by attack: it reads and writes the workspace, but
//! cannot write anywhere else, cannot touch the project's `.polpo/`, cannot read another
//! process's environment or signal it, leaves no `setsid` child behind, cannot connect to the
//! server's port, has no terminal and no inherited descriptor, reads only the world-readable
//! part of `/etc` under root, and runs within its resource limits and without root's
//! capabilities. Needs Landlock (Linux ≥ 6.12 for scoping).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{assert_no_survivors, call, code, ctx, dirs, marker, run_child_test, wait_until};
use polpo_tools::ToolContext;
use polpo_tools::sandbox::{
    CommandSpec, FORCE_UNAVAILABLE_ENV, Program, ResourceLimits, deny_connect_ports, run_command, sandbox_support,
};
use serde_json::json;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

/// Runs `command` through the `bash` tool and returns its text (`Exit code: N\n…`).
async fn bash(c: &ToolContext, command: &str) -> String {
    call(c, "bash", json!({"command": command})).await.unwrap().text
}

/// A process outside the sandbox holding a secret in its environment, as the server does.
struct SecretHolder(Child);

impl SecretHolder {
    fn start(secret: &str) -> Self {
        let child = Command::new("sleep").arg("300").env("OPENAI_API_KEY", secret).spawn().unwrap();
        Self(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn is_alive(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

impl Drop for SecretHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A workspace that is the project root: `.polpo/` with an agent and plain keys, an existing
/// `src/` directory and a top-level file.
fn project(ws: &Path) -> ToolContext {
    std::fs::create_dir_all(ws.join(".polpo/agents/a")).unwrap();
    std::fs::create_dir_all(ws.join(".polpo/hooks")).unwrap();
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join(".polpo/agents/a/agent.json"), r#"{"allowedTools":["bash"]}"#).unwrap();
    std::fs::write(ws.join(".polpo/project.json"), r#"{"apiKeys":["sk-plain-key"]}"#).unwrap();
    std::fs::write(ws.join("README.md"), "hello\n").unwrap();
    let mut c = ctx(ws);
    c.protected_paths = vec![ws.join(".polpo")];
    c
}

#[tokio::test]
async fn reads_and_writes_the_workspace_and_reports_its_confinement() {
    let d = dirs();
    std::fs::write(d.ws.join("in.txt"), "input\n").unwrap();
    let out = call(
        &ctx(&d.ws),
        "bash",
        json!({"command": "cat in.txt; mkdir -p a/b && echo made > a/b/c.txt && cat a/b/c.txt; echo tmp > \"$TMPDIR/t\" && cat \"$TMPDIR/t\""}),
    )
    .await
    .unwrap();
    assert_eq!(out.text, "Exit code: 0\ninput\nmade\ntmp\n");
    assert_eq!(std::fs::read_to_string(d.ws.join("a/b/c.txt")).unwrap(), "made\n");
    assert_eq!(out.details["sandbox"], json!({"filesystem": true, "contained": true}));
}

#[tokio::test]
async fn cannot_write_outside_the_workspace() {
    let d = dirs();
    let m = marker();
    let evil = d.outside.join("evil.txt");
    let in_tmp = std::env::temp_dir().join(format!("polpo-evil-{m}"));
    let command = format!(
        "echo pwned > {}; echo pwned > {}; mkdir {}/dir; ln -s /etc {}/link; echo done",
        evil.display(),
        in_tmp.display(),
        d.outside.display(),
        d.outside.display()
    );
    let out = bash(&ctx(&d.ws), &command).await;
    assert!(out.ends_with("done\n"), "{out}");
    assert!(out.contains("Permission denied"), "{out}");
    assert!(!evil.exists());
    assert!(!in_tmp.exists());
    assert_eq!(std::fs::read_dir(&d.outside).unwrap().count(), 0);
}

#[tokio::test]
async fn cannot_read_or_change_the_project_folder() {
    let d = dirs();
    let c = project(&d.ws);
    let out = bash(
        &c,
        r#"echo '{"allowedTools":["*"]}' > .polpo/agents/a/agent.json
echo '{}' > .polpo/hooks/x.json
cat .polpo/project.json
mv .polpo/project.json stolen.json
ln .polpo/project.json src/hard.json
ln -s ../.polpo/hooks src/hooks && echo '{}' > src/hooks/y.json
rm -rf .polpo
echo still > README.md; echo new > src/new.txt; cat README.md src/new.txt"#,
    )
    .await;
    assert!(!out.contains("sk-plain-key"), "{out}");
    assert!(out.ends_with("still\nnew\n"), "{out}");
    assert_eq!(
        std::fs::read_to_string(d.ws.join(".polpo/agents/a/agent.json")).unwrap(),
        r#"{"allowedTools":["bash"]}"#
    );
    assert!(!d.ws.join(".polpo/hooks/x.json").exists());
    assert!(!d.ws.join(".polpo/hooks/y.json").exists());
    assert!(d.ws.join(".polpo/project.json").exists());
    assert!(!d.ws.join("stolen.json").exists());
    assert!(!d.ws.join("src/hard.json").exists());
}

#[tokio::test]
async fn in_the_project_root_bash_creates_files_and_sees_an_empty_read_only_project_folder() {
    let d = dirs();
    let c = project(&d.ws);
    let out = bash(
        &c,
        "echo x > new-top.txt && mkdir newdir && echo edit >> README.md && echo created; \
         ls -A .polpo | wc -l; touch .polpo/x; mkdir .polpo/agents; umount .polpo; echo end",
    )
    .await;
    assert!(out.contains("created\n0\n"), "{out}");
    assert!(out.contains("Read-only file system"), "{out}");
    assert!(out.ends_with("end\n"), "{out}");
    assert!(d.ws.join("new-top.txt").exists());
    assert!(d.ws.join("newdir").is_dir());
    assert_eq!(std::fs::read_to_string(d.ws.join("README.md")).unwrap(), "hello\nedit\n");
    // The server still sees its own folder.
    assert!(d.ws.join(".polpo/project.json").exists());
    assert!(!d.ws.join(".polpo/x").exists());
}

/// Runs in a child test process started with namespaces reported missing: Landlock alone
/// must keep `.polpo/` out, at the price of new top-level entries.
#[tokio::test]
#[ignore = "started by without_namespaces_landlock_alone_protects_the_project_folder"]
async fn without_namespaces_child() {
    assert!(
        sandbox_support().notices().iter().any(|n| n.message.contains("namespaces")),
        "not started by the parent test"
    );
    let d = dirs();
    let c = project(&d.ws);
    let out = call(
        &c,
        "bash",
        json!({"command": "cat .polpo/project.json; echo '{}' > .polpo/hooks/x.json; echo x > new-top.txt; echo edit >> README.md; echo new > src/new.txt"}),
    )
    .await
    .unwrap();
    assert_eq!(out.details["sandbox"], json!({"filesystem": true, "contained": false}));
    assert!(!out.text.contains("sk-plain-key"), "{}", out.text);
    assert!(!d.ws.join(".polpo/hooks/x.json").exists());
    // Landlock cannot grant "create here" on the root without granting it in `.polpo/`.
    assert!(!d.ws.join("new-top.txt").exists());
    assert_eq!(std::fs::read_to_string(d.ws.join("README.md")).unwrap(), "hello\nedit\n");
    assert!(d.ws.join("src/new.txt").exists());
    // A protected folder under a read-granted system directory is left out of that grant too.
    if nix::unistd::geteuid().is_root() {
        let (_cleanup, polpo) = project_under_opt();
        let mut c = ctx(&d.ws);
        c.protected_paths = vec![polpo.clone()];
        let out = peek_into(&c, &polpo).await;
        // Its names stay listable (Landlock's listing right covers the whole tree beneath).
        assert!(!out.contains("sk-opt-key"), "{out}");
        assert!(out.contains("project.json: Permission denied"), "{out}");
        assert!(out.ends_with("end\n"), "{out}");
    }
}

#[test]
fn without_namespaces_landlock_alone_protects_the_project_folder() {
    run_child_test("without_namespaces_child", &[(FORCE_UNAVAILABLE_ENV, "namespaces")]);
}

#[tokio::test]
async fn cannot_read_the_environment_of_a_process_outside() {
    let d = dirs();
    let mut holder = SecretHolder::start("sk-secret-environ");
    let environ = format!("/proc/{}/environ", holder.pid());
    // The secret is there to be read by anyone outside the sandbox with the same uid (once the
    // holder has exec'd: before, its environ is still this test's).
    let readable = wait_until(Duration::from_secs(10), || {
        std::fs::read(&environ).is_ok_and(|e| String::from_utf8_lossy(&e).contains("sk-secret-environ"))
    });
    assert!(readable, "the holder never showed its secret");
    let parent = format!("/proc/{}/environ", std::process::id());
    let command = format!(
        "tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' '\\n' < {environ}; tr '\\0' '\\n' < {parent}; grep -a OPENAI /proc/*/environ; env"
    );
    let out = bash(&ctx(&d.ws), &command).await;
    assert!(!out.contains("sk-secret-environ"), "{out}");
    assert!(!out.contains("OPENAI_API_KEY"), "{out}");
    assert!(holder.is_alive());
}

#[tokio::test]
async fn cannot_signal_a_process_outside() {
    let d = dirs();
    let mut holder = SecretHolder::start("unused");
    let out = bash(&ctx(&d.ws), &format!("kill -KILL {0}; kill -TERM {0}; echo $?", holder.pid())).await;
    assert!(out.ends_with("1\n"), "{out}");
    assert!(holder.is_alive(), "the sandbox killed a process outside it");
}

#[tokio::test]
async fn setsid_children_do_not_outlive_the_call() {
    let d = dirs();
    let m = marker();
    // `setsid` leaves the process group, so only the PID namespace catches it.
    let command = format!(
        "setsid sh -c 'echo up > up; exec sleep 300.{m}' </dev/null >/dev/null 2>&1 & \
         until [ -s up ]; do :; done; (setsid sleep 301.{m} &) ; echo started"
    );
    let out = bash(&ctx(&d.ws), &command).await;
    assert_eq!(out, "Exit code: 0\nstarted\n");
    assert_no_survivors(&m);
}

#[tokio::test]
async fn hooks_get_the_containment_but_not_the_file_rules() {
    let d = dirs();
    let m = marker();
    let target = d.outside.join("audit.log");
    let mut spec = CommandSpec::new(
        Program::Shell(format!(
            "echo audited > {}; (setsid sleep 300.{m} </dev/null >/dev/null 2>&1 &); echo ok",
            target.display()
        )),
        &d.ws,
    );
    spec.timeout = Duration::from_secs(30);
    let outcome = run_command(spec).await.unwrap();
    assert_eq!(outcome.stdout.render(), "ok\n");
    assert!(outcome.isolation.contained && !outcome.isolation.filesystem);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "audited\n");
    assert_no_survivors(&m);
}

#[tokio::test]
async fn resource_limits_apply() {
    let d = dirs();
    let mut c = ctx(&d.ws);
    c.sandbox.limits =
        ResourceLimits { cpu_seconds: 7, memory_bytes: 1 << 30, max_processes: 64, file_size_bytes: 1 << 20 };
    let out = bash(&c, "cat /proc/self/limits; head -c 2000000 /dev/zero > big; wc -c < big").await;
    let limit = |name: &str| -> Vec<String> {
        let line = out.lines().find(|l| l.starts_with(name)).unwrap_or_else(|| panic!("{out}"));
        line[name.len()..].split_whitespace().take(2).map(str::to_owned).collect()
    };
    assert_eq!(limit("Max cpu time"), ["7", "7"]);
    assert_eq!(limit("Max address space"), ["1073741824", "1073741824"]);
    assert_eq!(limit("Max processes"), ["64", "64"]);
    assert_eq!(limit("Max file size"), ["1048576", "1048576"]);
    assert_eq!(limit("Max core file size"), ["0", "0"]);
    assert!(out.ends_with("\n1048576\n"), "{out}");
    assert_eq!(std::fs::metadata(d.ws.join("big")).unwrap().len(), 1 << 20);
}

#[tokio::test]
async fn root_runs_without_capabilities_and_system_secrets_stay_closed() {
    let d = dirs();
    if !nix::unistd::geteuid().is_root() {
        return; // Nothing to drop.
    }
    let out = bash(
        &ctx(&d.ws),
        "grep -E '^Cap(Eff|Prm|Bnd|Amb)' /proc/self/status; cat /etc/shadow >/dev/null && echo shadow-readable; cat /etc/ssh/ssh_config >/dev/null && echo ssh-readable; head -c 4 /dev/urandom | wc -c; cat /etc/hostname >/dev/null && echo etc-readable",
    )
    .await;
    for set in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] {
        assert!(out.contains(&format!("{set}:\t0000000000000000")), "{out}");
    }
    // Root owns these files, so only the rules keep them closed.
    assert!(std::fs::read("/etc/shadow").is_ok(), "the test runs as root");
    assert!(!out.contains("shadow-readable"), "{out}");
    assert!(!out.contains("ssh-readable"), "{out}");
    assert!(out.contains("\n4\n"), "{out}");
    assert!(out.contains("etc-readable"), "{out}");
}

#[tokio::test]
async fn run_as_switches_to_that_user() {
    let d = dirs();
    if !nix::unistd::geteuid().is_root() {
        return; // Only root can switch users.
    }
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    // The user must be able to reach and write the workspace.
    use std::os::unix::fs::PermissionsExt;
    for dir in [d.ws.parent().unwrap(), d.ws.as_path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let mut c = ctx(&d.ws);
    c.sandbox.run_as = Some("nobody".into());
    let out = bash(&c, "id -u; id -g; echo hi > mine.txt; echo tmp > \"$TMPDIR/x\" && echo tmp-ok").await;
    assert_eq!(out, format!("Exit code: 0\n{}\n{}\ntmp-ok\n", nobody.uid, nobody.gid));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(d.ws.join("mine.txt")).unwrap().uid(), nobody.uid.as_raw());
}

#[tokio::test]
async fn an_unknown_run_as_user_is_refused() {
    let d = dirs();
    let mut c = ctx(&d.ws);
    c.sandbox.run_as = Some("no-such-user-polpo".into());
    assert_eq!(code(call(&c, "bash", json!({"command": "true"})).await), "unknown_user");
}

/// Runs in a child test process started with Landlock reported missing.
#[tokio::test]
#[ignore = "started by without_landlock_bash_is_refused_unless_allowed with the override set"]
async fn unavailable_child() {
    assert_eq!(sandbox_support().landlock_abi, None, "not started by the parent test");
    let notice = &sandbox_support().notices()[0];
    assert_eq!(notice.code, "sandbox_unavailable");
    assert!(notice.message.contains("Landlock is not available"), "{notice:?}");
    let d = dirs();
    let mut c = ctx(&d.ws);
    let err = call(&c, "bash", json!({"command": "echo hi"})).await.unwrap_err();
    assert_eq!(err.code, "sandbox_unavailable");
    c.sandbox.allow_unconfined = true;
    let out = call(&c, "bash", json!({"command": "echo hi"})).await.unwrap();
    assert_eq!(out.text, "Exit code: 0\nhi\n");
    assert_eq!(out.details["sandbox"]["filesystem"], false);
}

#[test]
fn without_landlock_bash_is_refused_unless_allowed() {
    run_child_test("unavailable_child", &[(FORCE_UNAVAILABLE_ENV, "landlock")]);
}

/// A server that is not root cannot create a bare PID namespace; it gets a user + PID
/// namespace instead, and Landlock needs no privilege. Runs this whole file again as `nobody`.
#[test]
fn an_unprivileged_server_gets_the_same_confinement() {
    if !nix::unistd::geteuid().is_root() {
        return; // Already unprivileged: the other tests are this check.
    }
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    // The test binary may sit under a folder `nobody` cannot enter (CI builds into
    // `/root/.cache`): run a copy from a folder it can.
    let copy = tempfile::tempdir().unwrap();
    std::fs::set_permissions(copy.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = copy.path().join("bash_confinement");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    // The copy was just written: a process another test forks at that moment inherits the
    // write descriptor until it execs, and exec of the copy then fails with ETXTBSY. That
    // window is the kernel's, not ours; try again while it is open (bounded).
    let run = || {
        Command::new(&exe)
            .args(["--skip", "an_unprivileged_server_gets_the_same_confinement"])
            .uid(65534)
            .gid(65534)
            .env("HOME", std::env::temp_dir())
            .current_dir(copy.path())
            .output()
    };
    let mut output = run();
    for _ in 0..100 {
        match &output {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(10));
                output = run();
            }
            _ => break,
        }
    }
    let output = output.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    // This one asserts the PID namespace and Landlock were both in force.
    assert!(stdout.contains("test reads_and_writes_the_workspace_and_reports_its_confinement ... ok"), "{stdout}");
}

/// Runs `/usr/bin/python3` from `bash` to open a TCP connection to each of `ports` on
/// 127.0.0.1; prints `<port> connected` or `<port> refused <errno>` for each.
async fn connect_from_bash(c: &ToolContext, ports: &[u16]) -> String {
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let script = "import socket,sys\nfor p in sys.argv[1:]:\n    try:\n        socket.create_connection(('127.0.0.1', int(p)), timeout=10).close(); print(p, 'connected')\n    except OSError as e:\n        print(p, 'refused', e.errno)";
    bash(c, &format!("/usr/bin/python3 -c \"{script}\" {}", ports.join(" "))).await
}

/// The server's own port is closed to `bash` (it would otherwise drive the server's API over
/// loopback: without an API key the server trusts every local process); other ports are not.
#[tokio::test]
async fn cannot_connect_to_the_servers_own_port() {
    assert!(sandbox_support().landlock_abi >= Some(4), "needs Landlock network rules");
    let d = dirs();
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (denied, allowed) = (server.local_addr().unwrap().port(), other.local_addr().unwrap().port());
    // Process-wide, as `polpo serve` does once its listener is bound; only this test sets it.
    deny_connect_ports(&[denied]).unwrap();
    let out = connect_from_bash(&ctx(&d.ws), &[denied, allowed]).await;
    assert!(out.contains(&format!("{denied} refused {}", nix::libc::EACCES)), "{out}");
    assert!(out.contains(&format!("{allowed} connected")), "{out}");
    // The kernel completes a connection into the backlog before any accept: had one reached
    // the denied listener, it would be waiting there now.
    server.set_nonblocking(true).unwrap();
    other.set_nonblocking(true).unwrap();
    assert_eq!(server.accept().map(drop).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    assert!(other.accept().is_ok());
}

/// Runs under a terminal (`script` gives it one): `bash` must not reach it — no controlling
/// terminal, `/dev/tty` not granted — so it cannot push keystrokes into the user's shell.
#[tokio::test]
#[ignore = "started by under_a_terminal_bash_has_none under script(1)"]
async fn terminal_child() {
    let own = std::fs::read_to_string("/proc/self/stat").unwrap();
    let tty_nr = |stat: &str| -> String {
        let (_, rest) = stat.rsplit_once(')').unwrap();
        rest.split_whitespace().nth(4).unwrap().to_owned()
    };
    assert_ne!(tty_nr(&own), "0", "not started under a terminal");
    let d = dirs();
    let out = bash(
        &ctx(&d.ws),
        "read -r pid comm state ppid pgrp session tty rest < /proc/$$/stat; echo \"tty_nr=$tty\"; \
         (exec 3</dev/tty && echo tty-opened); (exec 3>/dev/tty && echo tty-opened); echo end",
    )
    .await;
    assert!(out.contains("tty_nr=0\n"), "{out}");
    assert!(!out.contains("tty-opened"), "{out}");
    assert!(out.ends_with("end\n"), "{out}");
}

#[test]
fn under_a_terminal_bash_has_none() {
    let exe = std::env::current_exe().unwrap();
    let output = Command::new("script")
        .args(["-qec", &format!("{} terminal_child --exact --ignored", exe.display()), "/dev/null"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(stdout.contains("1 passed"), "{stdout}");
}

/// A descriptor the server holds without close-on-exec (inherited from whoever started it) does
/// not reach `bash`: it could read a file the rules forbid through it.
#[tokio::test]
async fn inherits_no_descriptor_but_stdio() {
    use std::os::fd::AsRawFd;
    let d = dirs();
    let secret = d.outside.join("secret.txt");
    std::fs::write(&secret, "fd-secret-inherited\n").unwrap();
    let file = std::fs::File::open(&secret).unwrap();
    nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty())).unwrap();
    let fd = file.as_raw_fd();
    let out = bash(&ctx(&d.ws), &format!("ls -l /proc/$$/fd; /bin/bash -c 'cat <&{fd}'; echo end")).await;
    drop(file);
    assert!(!out.contains("fd-secret-inherited"), "{out}");
    assert!(!out.contains("secret.txt"), "{out}");
    assert!(out.ends_with("end\n"), "{out}");
}

/// Removes a directory tree created outside the temp dir when the test ends.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A project folder under `/opt` (read-granted to `bash`) with the workspace elsewhere.
fn project_under_opt() -> (RemoveOnDrop, std::path::PathBuf) {
    let base = Path::new("/opt").join(format!("polpo-sandbox-test-{}", marker()));
    let cleanup = RemoveOnDrop(base.clone());
    std::fs::create_dir_all(base.join(".polpo/agents")).unwrap();
    std::fs::write(base.join(".polpo/project.json"), r#"{"apiKeys":["sk-opt-key"]}"#).unwrap();
    (cleanup, base.join(".polpo"))
}

/// Reads and lists `polpo` (a protected folder outside the workspace) from `bash`.
async fn peek_into(c: &ToolContext, polpo: &Path) -> String {
    bash(c, &format!("cat {0}/project.json; ls -A {0}; echo end", polpo.display())).await
}

#[tokio::test]
async fn a_project_folder_under_a_system_directory_stays_closed() {
    if !nix::unistd::geteuid().is_root() {
        return; // Only root can create a project under /opt.
    }
    let (_cleanup, polpo) = project_under_opt();
    let d = dirs();
    let mut c = ctx(&d.ws);
    c.protected_paths = vec![polpo.clone()];
    let out = peek_into(&c, &polpo).await;
    assert!(!out.contains("sk-opt-key"), "{out}");
    assert!(!out.contains("agents"), "{out}");
    assert!(out.ends_with("end\n"), "{out}");
}

/// Runs in a child test process with the files below already in `/etc` (the `/etc` walk is
/// done once per process): a root server's `bash` reads only what any user could.
#[tokio::test]
#[ignore = "started by under_root_bash_reads_only_world_readable_etc_files"]
async fn etc_child() {
    let m = std::env::var("POLPO_TEST_ETC_MARKER").expect("not started by the parent test");
    let d = dirs();
    let out = bash(
        &ctx(&d.ws),
        &format!(
            "cd /etc; cat polpo-test-{m}/public.conf polpo-test-{m}/private.key polpo-test-{m}/keys/inner.conf polpo-test-{m}.secret; ls polpo-test-{m}; echo end"
        ),
    )
    .await;
    assert!(out.contains("etc-public\n"), "{out}");
    assert!(!out.contains("etc-private"), "{out}");
    assert!(!out.contains("etc-inner"), "{out}");
    assert!(!out.contains("etc-top"), "{out}");
    assert!(out.contains("keys\nprivate.key\npublic.conf\n"), "{out}");
    assert!(out.ends_with("end\n"), "{out}");
}

#[test]
fn under_root_bash_reads_only_world_readable_etc_files() {
    if !nix::unistd::geteuid().is_root() {
        return; // Without root the kernel's own permissions keep root's files closed.
    }
    use std::os::unix::fs::PermissionsExt;
    let m = marker();
    let dir = Path::new("/etc").join(format!("polpo-test-{m}"));
    let top = Path::new("/etc").join(format!("polpo-test-{m}.secret"));
    let _cleanup = (RemoveOnDrop(dir.clone()), RemoveOnDrop(top.clone()));
    let file = |path: &Path, text: &str, mode: u32| {
        std::fs::write(path, text).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    std::fs::create_dir_all(dir.join("keys")).unwrap();
    std::fs::set_permissions(dir.join("keys"), std::fs::Permissions::from_mode(0o700)).unwrap();
    file(&dir.join("public.conf"), "etc-public\n", 0o644);
    file(&dir.join("private.key"), "etc-private\n", 0o600);
    file(&dir.join("keys/inner.conf"), "etc-inner\n", 0o644);
    file(&top, "etc-top\n", 0o600);
    run_child_test("etc_child", &[("POLPO_TEST_ETC_MARKER", &m)]);
}
