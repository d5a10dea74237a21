//! N: IPC and network (threats 45-54): TCP/UDP egress and host loopback,
//! UNIX and abstract sockets, socket families a sandbox never needs, signals
//! to host pids, SysV shared memory and the UTS hostname.

use std::ffi::CStr;
use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixStream};
use std::time::Duration;

use libc::{
    EACCES, EAFNOSUPPORT, ECONNREFUSED, EHOSTUNREACH, EIDRM, EINVAL, ENETUNREACH, ENOENT, ENOSYS,
    ENOTDIR, EPERM, EPROTONOSUPPORT, ESRCH,
};

use crate::child::kill;
use crate::consts::EXTERNAL_TARGETS;
use crate::report::{judge, Args, Findings, UsageError, Verdict};
use crate::sys::{self, cvt, owned, Errno};

/// Refusals of creating a socket of a forbidden family.
const FAMILY_DENIED: &[i32] = &[EPERM, EACCES, EAFNOSUPPORT, EPROTONOSUPPORT, ENOSYS];
/// How long a TCP connect may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

fn address(args: &Args<'_>) -> Result<SocketAddr, UsageError> {
    args.at_most(1)?;
    args.parsed(0, "IP:PORT (an IP literal, e.g. 127.0.0.1:80 or [::1]:80)")
}

/// TCP connect to IP:PORT.
pub fn tcp_connect(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let target = address(args)?;
    let result = TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)
        .map(|s| format!("connected from {:?}", s.local_addr().ok()))
        .map_err(Errno::from);
    Ok(judge(
        &format!("connect({target})"),
        result,
        &[
            ECONNREFUSED,
            ENETUNREACH,
            EHOSTUNREACH,
            EPERM,
            EACCES,
            EAFNOSUPPORT,
        ],
    ))
}

/// TCP connect to two well-known external addresses.
pub fn tcp_connect_external(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let mut findings = Findings::new();
    for text in EXTERNAL_TARGETS {
        let Ok(target) = text.parse::<SocketAddr>() else {
            continue;
        };
        let what = format!("connect({target})");
        match TcpStream::connect_timeout(&target, CONNECT_TIMEOUT).map_err(Errno::from) {
            Ok(_) => findings.escaped(format!("{what}: connected")),
            Err(e) if e.is_one_of(&[ENETUNREACH, EPERM, EACCES, EAFNOSUPPORT]) => {
                findings.refused(format!("{what}: {e}"))
            }
            Err(e) => findings.escaped(format!(
                "{what}: {e} (not a local refusal: packets left the namespace)"
            )),
        }
    }
    Ok(findings.verdict())
}

/// bind 0.0.0.0:PORT and listen.
pub fn tcp_bind(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let port: u16 = args.parsed(0, "PORT")?;
    let result = TcpListener::bind(("0.0.0.0", port))
        .map(|l| format!("listening on {:?} (closed)", l.local_addr().ok()))
        .map_err(Errno::from);
    Ok(judge(
        &format!("bind+listen(0.0.0.0:{port})"),
        result,
        &[EACCES, EPERM],
    ))
}

/// connect to a UNIX socket path.
pub fn unix_connect(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let path = args.required(0, "PATH")?;
    let result = UnixStream::connect(path)
        .map(|_| "connected".to_string())
        .map_err(Errno::from);
    Ok(judge(
        &format!("connect(unix:{path})"),
        result,
        &[ENOENT, EACCES, EPERM, ECONNREFUSED, ENOTDIR],
    ))
}

/// connect to an abstract UNIX socket.
pub fn abstract_connect(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let name = args.required(0, "NAME")?;
    let what = format!("connect(unix:@{name})");
    let result = UnixAddr::from_abstract_name(name.as_bytes())
        .and_then(|addr| UnixStream::connect_addr(&addr))
        .map(|_| "connected".to_string())
        .map_err(Errno::from);
    Ok(judge(&what, result, &[ECONNREFUSED, EPERM, EACCES]))
}

fn socket_of(what: &str, domain: i32, kind: i32, protocol: i32) -> Verdict {
    // SAFETY: socket takes plain integers.
    let result =
        cvt(unsafe { libc::socket(domain, kind | libc::SOCK_CLOEXEC, protocol) }).map(|fd| {
            drop(owned(fd as i32));
            format!("fd {fd} (closed)")
        });
    judge(what, result, FAMILY_DENIED)
}

/// socket(AF_NETLINK).
pub fn netlink_socket(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    Ok(socket_of(
        "socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE)",
        libc::AF_NETLINK,
        libc::SOCK_RAW,
        libc::NETLINK_ROUTE,
    ))
}

/// socket(AF_PACKET).
pub fn packet_socket(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    let all = i32::from((libc::ETH_P_ALL as u16).to_be());
    Ok(socket_of(
        "socket(AF_PACKET, SOCK_RAW, ETH_P_ALL)",
        libc::AF_PACKET,
        libc::SOCK_RAW,
        all,
    ))
}

/// socket(AF_VSOCK), never connected.
pub fn vsock_socket(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(0)?;
    Ok(socket_of(
        "socket(AF_VSOCK, SOCK_STREAM)",
        libc::AF_VSOCK,
        libc::SOCK_STREAM,
        0,
    ))
}

/// One UDP datagram to IP:PORT.
pub fn udp_send(args: &Args<'_>) -> Result<Verdict, UsageError> {
    let target = address(args)?;
    let what = format!("send(udp {target})");
    let local = if target.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let sent = UdpSocket::bind(local).and_then(|s| {
        s.connect(target)?;
        let n = s.send(b"spawnd-probe")?;
        Ok((s, n))
    });
    let refusals = &[ENETUNREACH, EHOSTUNREACH, EPERM, EACCES, EAFNOSUPPORT];
    let (socket, n) = match sent {
        Ok(pair) => pair,
        Err(e) => return Ok(judge(&what, Err(e.into()), refusals)),
    };
    if !target.ip().is_loopback() {
        return Ok(Verdict::escaped(format!(
            "{what} = {n} bytes to a non-loopback address"
        )));
    }
    // On loopback, a missing listener answers at once with ICMP port
    // unreachable, which the connected socket reports as ECONNREFUSED.
    let _ = socket.set_read_timeout(Some(Duration::from_millis(300)));
    let mut buf = [0u8; 64];
    Ok(match socket.recv(&mut buf) {
        Err(e) if e.raw_os_error() == Some(ECONNREFUSED) => Verdict::blocked(format!(
            "{what} = {n} bytes, then ECONNREFUSED: no listener got it"
        )),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            Verdict::escaped(format!(
                "{what} = {n} bytes, no port-unreachable: a listener got it"
            ))
        }
        Ok(len) => Verdict::escaped(format!("{what} = {n} bytes, and {len} bytes came back")),
        Err(e) => Verdict::unclear(format!("{what} = {n} bytes, then recv: {}", Errno::from(e))),
    })
}

/// kill(PID, 0).
pub fn kill_host_pid(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let pid: i32 = args.parsed(0, "PID")?;
    if pid <= 0 {
        return Err(UsageError(format!("PID must be positive, got {pid}")));
    }
    if pid == sys::getpid() {
        return Ok(Verdict::blocked(format!(
            "pid {pid} is the probe itself here: the host pid is not visible"
        )));
    }
    let result = kill(pid, 0).map(|_| "0 (the process can be signalled)".to_string());
    Ok(judge(&format!("kill({pid}, 0)"), result, &[ESRCH, EPERM]))
}

/// shmctl(IPC_STAT) and shmat on a host segment id.
pub fn sysv_shm(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let id: i32 = args.parsed(0, "SHMID")?;
    let refusals = &[EINVAL, EACCES, EPERM, EIDRM, ENOSYS];
    let mut findings = Findings::new();
    // SAFETY: an all-zero shmid_ds is a valid out-buffer.
    let mut ds: libc::shmid_ds = unsafe { std::mem::zeroed() };
    // SAFETY: `ds` is a valid out-pointer for IPC_STAT.
    let stat = cvt(unsafe { libc::shmctl(id, libc::IPC_STAT, &mut ds) });
    let stat = stat.map(|_| format!("0 (size {}, creator pid {})", ds.shm_segsz, ds.shm_cpid));
    findings.check(&format!("shmctl({id}, IPC_STAT)"), stat, refusals);
    // SAFETY: a NULL address lets the kernel choose; read-only attach.
    let addr = unsafe { libc::shmat(id, std::ptr::null(), libc::SHM_RDONLY) };
    let attach = if addr as isize == -1 {
        Err(Errno::last())
    } else {
        // SAFETY: `addr` was just returned by shmat.
        unsafe { libc::shmdt(addr) };
        Ok(format!("{addr:?} (detached)"))
    };
    findings.check(&format!("shmat({id}, SHM_RDONLY)"), attach, refusals);
    Ok(findings.verdict())
}

/// Compares the UTS hostname with the host's.
pub fn hostname(args: &Args<'_>) -> Result<Verdict, UsageError> {
    args.at_most(1)?;
    let host = args.required(0, "HOST_HOSTNAME")?;
    // SAFETY: an all-zero utsname is a valid out-buffer.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: `uts` is a valid out-pointer.
    if let Err(e) = cvt(unsafe { libc::uname(&mut uts) }) {
        return Ok(Verdict::unclear(format!("uname: {e}")));
    }
    // SAFETY: uname NUL-terminates nodename within its array.
    let mine = unsafe { CStr::from_ptr(uts.nodename.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    Ok(if mine == host {
        Verdict::escaped(format!("hostname {mine:?} is the host's"))
    } else {
        Verdict::blocked(format!(
            "hostname {mine:?} differs from the host's {host:?}"
        ))
    })
}
