"""Kernel receive stamps: a chunk's arrival is when the kernel got it, not when it was read."""

import socket
import sys
import time

import pytest

from advisor.measure.arrival import SO_TIMESTAMPNS, StampedSocket, StampedSockets

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")


def _connected_pair():
    """(server side, client side) of a loopback TCP connection; the client side stamped."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        info = socket.getaddrinfo("127.0.0.1", listener.getsockname()[1],
                                  type=socket.SOCK_STREAM)[0]
        client = StampedSockets()(info)
        client.connect(info[4])
        server, _ = listener.accept()
    # NOTE: the kernel turns its receive stamps on a moment after the first socket asks
    # (deferred work): until then reads carry none. Wait for a stamped byte.
    for _ in range(100):
        server.sendall(b"!")
        if client.recvmsg(1, socket.CMSG_SPACE(16))[1]:
            break
        time.sleep(0.001)
    return server, client


@linux
@pytest.mark.parametrize("read", ["recv", "recv_into"])
def test_a_late_read_is_stamped_when_the_bytes_arrived(read):
    server, client = _connected_pair()
    with server, client:
        assert client.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS) == 1
        sent = time.monotonic()
        server.sendall(b"data: 1\n\n")
        time.sleep(0.2)  # the reader is busy elsewhere for 200 ms
        if read == "recv":
            got = client.recv(64)
        else:
            buf = bytearray(64)
            got = bytes(buf[: client.recv_into(buf)])
        read_at = time.monotonic()
        assert got == b"data: 1\n\n"
        # NOTE: the stamp is on the wall clock, which a VM's host may step by a millisecond
        # between the stamp and the read; 200 ms before the read all the same
        assert sent - 0.002 <= client.arrived < sent + 0.01
        assert read_at - client.arrived > 0.19


@linux
def test_without_the_kernels_stamp_a_read_is_stamped_when_it_happens():
    server, client = _connected_pair()
    with server, client:
        client.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 0)
        server.sendall(b"x")
        time.sleep(0.05)
        before = time.monotonic()
        assert client.recv(8) == b"x"
        assert before <= client.arrived <= time.monotonic()


def test_the_factory_finds_a_connections_socket_by_its_transport():
    class Transport:  # what asyncio's transports answer for "socket"
        def __init__(self, sock):
            self.sock = sock

        def get_extra_info(self, name):
            return self.sock if name == "socket" else None

    factory = StampedSockets()
    sock = factory(socket.getaddrinfo("127.0.0.1", 80, type=socket.SOCK_STREAM)[0])
    other = socket.socket()
    with sock, other:
        assert isinstance(sock, StampedSocket)
        assert factory.of(Transport(sock)) is sock
        assert factory.of(Transport(other)) is None
        assert factory.of(None) is None
