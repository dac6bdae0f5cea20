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


# a half-block cell's colours (ANSI): the upper module is the foreground, the lower the background
_FOREGROUND = {True: "30", False: "97"}  # dark: black; light: bright white
_BACKGROUND = {True: "40", False: "107"}
_QUIET_ZONE = 4  # modules of light margin around the code, as the standard asks


def qr_modules(text: str) -> List[List[bool]]:
    """The QR code of ``text`` as rows of modules (True: dark), with its quiet zone."""
    import qrcode
    code = qrcode.QRCode(border=_QUIET_ZONE, error_correction=qrcode.constants.ERROR_CORRECT_L)
    code.add_data(text)
    code.make(fit=True)
    return [list(row) for row in code.get_matrix()]


def qr_text(text: str, colours: bool = True) -> str:
    """``text`` as a QR code for a phone's camera to read off the screen. With ``colours`` (a
    terminal), every module is drawn in an explicit colour, black or white, two modules a
    character (the upper half block), so the code reads the same on a light terminal and a dark
    one; without (a log file), dark modules are full blocks on the page's own light ground."""
    modules = qr_modules(text)
    if len(modules) % 2:
        modules.append([False] * len(modules[0]))
    out = io.StringIO()
    for upper, lower in zip(modules[::2], modules[1::2]):
        if colours:
            out.write("".join(f"\x1b[{_FOREGROUND[a]};{_BACKGROUND[b]}m\u2580" for a, b in zip(upper, lower)))
            out.write("\x1b[0m\n")
        else:
            out.write("".join({(True, True): "\u2588", (True, False): "\u2580", (False, True): "\u2584",
                               (False, False): " "}[a, b] for a, b in zip(upper, lower)).rstrip() + "\n")
    return out.getvalue()


def sign_in_text(root: str, urls: List[str], token_query: str, code_query: str = "", colours: bool = True) -> str:
    """What ``wenxin studio`` prints on start: the first address to open, each other one on a line of
    its own (with ``token_query``: a token generated now, printed this once), and a QR code of the
    first of the machine's own addresses with ``code_query`` (the token, whether chosen or made:
    the phone's way in)."""
    lines = [f"wenxin studio over {root}: open {urls[0]}{token_query}"]
    lines += [f"  or {url}{token_query}" for url in urls[1:]]
    phone = [url for url in urls if not is_loopback(urlsplit(url).hostname or "")]
    if phone:
        lines.append(f"a phone's camera opens {phone[0]} from this code:")
        lines.append(qr_text(phone[0] + (code_query or token_query), colours)[:-1])  # its light rows kept
    return "\n".join(lines)
