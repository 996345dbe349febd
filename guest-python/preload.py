"""Standard-library modules that route code may import.

componentize-py keeps only the modules imported while it builds the component (its snapshot);
the standard library is not present as files at run time. Importing them here, at build time,
puts them into the snapshot, so `import decimal` in a route file costs a dictionary lookup.
The README lists this set; extend it here to offer more.
"""

# ruff: noqa: F401
import abc
import array
import asyncio
import base64
import binascii
import bisect
import calendar
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
import email.utils
import encodings.idna
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
import http.cookies
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
import pprint
import random
import re
import secrets
import shlex
import socket
import statistics
import string
import struct
import sys
import textwrap
import time
import traceback
import types
import typing
import unicodedata
import urllib.parse
import uuid
import warnings
import weakref
import xml.etree.ElementTree
import zlib

MODULES = sorted(
    name
    for name, module in list(sys.modules.items())
    if module is not None and not name.startswith(("_", "wit_world", "componentize"))
)
