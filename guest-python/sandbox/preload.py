"""Standard-library modules imported at build time, into the guest's snapshot.

componentize-py keeps the modules imported while it builds the component (its snapshot); the
standard library is not present as files at run time. Importing these here, at build time, puts
them into the snapshot, so `import decimal` in a route file costs a dictionary lookup. Every
other pure-Python module of the standard library is importable too, from compiled code the host
keeps (importing.py), at the cost of an unmarshal on its first import in a request. docs/guides/packages.md
lists this set; add a module here when routes or common packages import it at module level.
"""

# ruff: noqa: F401
import sys

import __future__
import abc
import argparse
import ast
import array
import asyncio
import base64
import binascii
import bisect
import calendar
import concurrent.futures
import configparser
import collections
import collections.abc
import contextlib
import contextvars
import copy
import csv
import dataclasses
import datetime
import decimal
import difflib
import email.message
import email.parser
import email.utils
import errno
import encodings.ascii
import encodings.cp1252
import encodings.idna
import encodings.latin_1
import encodings.raw_unicode_escape
import encodings.unicode_escape
import encodings.utf_16
import encodings.utf_32
import enum
import fnmatch
import fractions
import functools
import graphlib
import hashlib
import heapq
import hmac
import html
import html.parser
import http
import http.client
import http.cookies
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.resources
import importlib.util
import inspect
import io
import ipaddress
import itertools
import json
import keyword
import logging
import math
import numbers
import operator
import os
import pathlib
import pickle
import pkgutil
import platform
import posixpath
import pprint
import random
import re
import secrets
import shlex
import shutil
import socket
import stat
import statistics
import string
import struct
import tempfile
import textwrap
import threading
import timeit
import time
import traceback
import types
import typing
import unicodedata
import urllib.error
import urllib.parse
import urllib.request
import urllib.response
import uuid
import warnings
import weakref
import xml.etree.ElementTree
import zipfile
import zipimport
import zlib
import zoneinfo

# `sqlite3`: the sandbox's own package (guest-python/stand_ins/sqlite3/), the standard library's API over
# the host's `sql` service. componentize-py's path lists its copy of the standard library ahead
# of guest-python, and the standard library's `sqlite3` cannot load on WASI (there is no
# `_sqlite3`), so ours is imported with this folder first on the path. Nothing may import
# `sqlite3` before this runs: dispatcher.py imports this module first.
_guest = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _guest)
try:
    import sqlite3
    import sqlite3.dbapi2
finally:
    sys.path.remove(_guest)
if not sqlite3.__file__.startswith(_guest + os.sep):
    raise ImportError(f"the standard library's sqlite3 was imported instead of the sandbox's: {sqlite3.__file__}")
del _guest

# Installed last: the standard library above imported without `ssl`, as it must on WASI.
# CPython on WASI has no `ssl` (no `_ssl`): packages that import it at load time get the
# stand-in in nossl.py (the sandbox has no network, so TLS could never be used anyway).
try:
    import ssl
except ImportError:
    import nossl as ssl

    sys.modules["ssl"] = ssl
