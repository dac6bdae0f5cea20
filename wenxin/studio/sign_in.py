"""Where to open the studio: the addresses it answers at (each of the machine's own when it listens
on every address, for a phone on the same network) and a QR code of one, drawn in the terminal."""
from __future__ import annotations

import ipaddress
import io
import socket
from typing import List
from urllib.parse import urlsplit

from wenxin.studio.security import is_loopback

EVERY_ADDRESS = ("0.0.0.0", "::")


def machine_addresses(ipv6: bool = False) -> List[str]:
    """This machine's own addresses on its network interfaces (IPv4; and IPv6 with ``ipv6``),
    loopback and link-local ones left out."""
    import psutil
    found: List[str] = []
    families = (socket.AF_INET, socket.AF_INET6) if ipv6 else (socket.AF_INET,)
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family not in families:
                continue
            text = address.address.split("%")[0]
            try:
                parsed = ipaddress.ip_address(text)
            except ValueError:
                continue
            if not (parsed.is_loopback or parsed.is_link_local) and text not in found:
                found.append(text)
    return found


def studio_urls(host: str, port: int) -> List[str]:
    """The addresses a studio bound to ``host`` answers at: ``localhost`` for 127.0.0.1, the address
    itself for another loopback address or a given one, and on every address (0.0.0.0, ::)
    localhost and each of the machine's own (a phone opens one of those: the machine's name may
    not resolve there)."""
    if host in EVERY_ADDRESS:
        hosts = ["localhost"] + machine_addresses(ipv6=host == "::")
    elif host in ("127.0.0.1", "localhost"):
        hosts = ["localhost"]
    else:
        hosts = [host]
    return [f"http://{f'[{name}]' if ':' in name else name}:{port}/" for name in hosts]


def qr_text(text: str) -> str:
    """``text`` as a QR code in half-block characters, dark on a light terminal or light on a dark
    one alike (the quiet zone is drawn), for a phone's camera to read off the screen."""
    import qrcode
    code = qrcode.QRCode(border=2, error_correction=qrcode.constants.ERROR_CORRECT_L)
    code.add_data(text)
    code.make(fit=True)
    out = io.StringIO()
    code.print_ascii(out=out, invert=True)
    return out.getvalue()


def sign_in_text(root: str, urls: List[str], token_query: str) -> str:
    """What ``wenxin studio`` prints on start: the first address to open, each other one on a line of
    its own, and a QR code of the first of the machine's own addresses (a phone's way in)."""
    lines = [f"wenxin studio over {root}: open {urls[0]}{token_query}"]
    lines += [f"  or {url}{token_query}" for url in urls[1:]]
    phone = [url for url in urls if not is_loopback(urlsplit(url).hostname or "")]
    if phone:
        lines.append(f"a phone's camera opens {phone[0]} from this code:")
        lines.append(qr_text(phone[0] + token_query).rstrip("\n"))
    return "\n".join(lines)
