//! Frames through a real socketpair: bodies, descriptors, limits.

use super::*;
use crate::ipc::*;
use crate::sandbox::launch::StdinSource;
use crate::sandbox::{Cause, Step};

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;

#[test]
fn a_frame_carries_its_body_and_descriptors() {
    let (a, b) = UnixStream::pair().unwrap();
    let file = tempfile::tempfile().unwrap();
    std::io::Write::write_all(&mut &file, b"through SCM_RIGHTS").unwrap();
    send(
        &a,
        &Reply::Launched {
            id: 7,
            init_pid: 42,
            cgroup: true,
            listener_ports: Some(vec![443]),
        },
        &[file.as_fd(), file.as_fd()],
    )
    .unwrap();
    send(
        &a,
        &Reply::Failed {
            id: 7,
            error: SetupError::new(Step::Root, "mount(/usr)", nix::Error::EPERM.into()),
        },
        &[],
    )
    .unwrap();
    let (reply, fds) = recv::<Reply>(&b).unwrap().unwrap();
    assert!(matches!(
        reply,
        Reply::Launched {
            id: 7,
            init_pid: 42,
            cgroup: true,
            listener_ports: Some(ref ports),
        } if ports == &[443]
    ));
    assert_eq!(fds.len(), 2);
    let mut text = String::new();
    let mut received = std::fs::File::from(fds.into_iter().next().unwrap());
    std::io::Seek::rewind(&mut received).unwrap();
    std::io::Read::read_to_string(&mut received, &mut text).unwrap();
    assert_eq!(text, "through SCM_RIGHTS");
    let (reply, fds) = recv::<Reply>(&b).unwrap().unwrap();
    // Typed across the frame: the step and the OS error, not a text.
    match reply {
        Reply::Failed { id: 7, error } => {
            assert_eq!(error.step, Step::Root);
            assert_eq!(error.source, Cause::Os(libc::EPERM));
            assert_eq!(error.call, "mount(/usr)");
        }
        other => panic!("{other:?}"),
    }
    assert!(fds.is_empty());
    drop(a);
    assert!(recv::<Reply>(&b).unwrap().is_none(), "end of stream");
}

/// A body with bytes after its value is refused, as a frame out of step.
#[test]
fn a_body_with_bytes_after_its_value_is_refused() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut body = postcard::to_allocvec(&Reply::Failed {
        id: 1,
        error: SetupError::because(Step::Spawner, "e", Cause::Other("e".into())),
    })
    .unwrap();
    body.push(0);
    let mut frame = (body.len() as u32).to_le_bytes().to_vec();
    frame.extend_from_slice(&0u32.to_le_bytes());
    frame.extend_from_slice(&body);
    std::io::Write::write_all(&mut &a, &frame).unwrap();
    let err = recv::<Reply>(&b).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains("after its body"), "{err}");
}

#[test]
fn a_body_larger_than_the_first_buffer_arrives_whole() {
    let (a, b) = UnixStream::pair().unwrap();
    let error = SetupError::because(Step::Root, "x".repeat(100_000), Cause::Other("y".into()));
    send(
        &a,
        &Reply::Failed {
            id: 3,
            error: error.clone(),
        },
        &[],
    )
    .unwrap();
    match recv::<Reply>(&b).unwrap().unwrap() {
        (Reply::Failed { id: 3, error: got }, fds) => {
            assert_eq!(got, error);
            assert!(fds.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

/// The seccomp filter crosses the frame as raw bytes: its length and the
/// bytes, no text encoding around them.
#[test]
fn a_launch_order_carries_the_filter_as_raw_bytes() {
    #[derive(Serialize)]
    struct Carrier {
        #[serde(with = "serde_bytes")]
        seccomp: Vec<u8>,
    }
    let all: Vec<u8> = (0..=255).collect();
    let body = postcard::to_allocvec(&Carrier {
        seccomp: all.clone(),
    })
    .unwrap();
    // 256 as a varint (2 bytes), then the bytes themselves.
    assert_eq!(body.len(), 2 + all.len());
    assert_eq!(&body[2..], all.as_slice());
}

/// argv, env entries and the filter are written as byte strings (one copy
/// each, not byte by byte): the frame holds the same bytes as serde's plain
/// sequence of `u8`s would, and reads back the same.
#[test]
fn byte_strings_keep_the_bytes_of_a_plain_sequence() {
    #[derive(Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Plain {
        argv: Vec<Vec<u8>>,
        seccomp: Vec<u8>,
    }
    #[derive(Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Packed {
        #[serde(with = "crate::ipc::byte_strings")]
        argv: Vec<Vec<u8>>,
        #[serde(with = "serde_bytes")]
        seccomp: Vec<u8>,
    }
    let argv = vec![b"/usr/bin/echo".to_vec(), vec![], (0..=255).collect()];
    let seccomp: Vec<u8> = (0..=255).cycle().take(5000).collect();
    let plain = postcard::to_allocvec(&Plain {
        argv: argv.clone(),
        seccomp: seccomp.clone(),
    })
    .unwrap();
    let packed = postcard::to_allocvec(&Packed {
        argv: argv.clone(),
        seccomp: seccomp.clone(),
    })
    .unwrap();
    assert_eq!(plain, packed);
    let back: Packed = postcard::from_bytes(&plain).unwrap();
    assert_eq!(back, Packed { argv, seccomp });
}

#[test]
fn a_lying_header_is_refused() {
    let (a, b) = UnixStream::pair().unwrap();
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&((MAX_BODY as u32) + 1).to_le_bytes());
    std::io::Write::write_all(&mut &a, &header).unwrap();
    assert!(recv::<Reply>(&b).is_err());
    let (a, b) = UnixStream::pair().unwrap();
    let mut header = [0u8; 8];
    header[..4].copy_from_slice(&2u32.to_le_bytes());
    header[4..].copy_from_slice(&3u32.to_le_bytes());
    std::io::Write::write_all(&mut &a, &header).unwrap();
    std::io::Write::write_all(&mut &a, b"{}").unwrap();
    assert!(
        recv::<Reply>(&b).is_err(),
        "descriptors announced but not sent"
    );
}

#[test]
fn launched_descriptors_come_back_by_name_and_only_in_their_number() {
    let all = |stdin: bool| LaunchedFds {
        stdout: 1,
        stderr: 2,
        status: 3,
        pidfd: 4,
        go_ahead: 5,
        cgroup_memory: Some(6),
        listeners: vec![7, 8, 9, 10],
        stdin: stdin.then_some(11),
    };
    let list = all(true).into_list();
    assert_eq!(list, (1..=11).collect::<Vec<_>>());
    assert_eq!(
        LaunchedFds::from_list(list.clone(), true, 4, StdinSource::Pipe),
        Some(all(true))
    );
    // One too many or too few is refused, not read as something else.
    assert_eq!(
        LaunchedFds::from_list(list.clone(), true, 4, StdinSource::Null),
        None
    );
    assert_eq!(
        LaunchedFds::from_list(list[..10].to_vec(), true, 4, StdinSource::Pipe),
        None
    );
    assert_eq!(
        LaunchedFds::from_list(list, false, 4, StdinSource::Pipe),
        None
    );
    let bare = LaunchedFds {
        cgroup_memory: None,
        listeners: Vec::new(),
        ..all(false)
    };
    assert_eq!(
        LaunchedFds::from_list(bare.into_list(), false, 0, StdinSource::Null).map(|f| f.go_ahead),
        Some(5)
    );
}
