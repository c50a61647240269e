"""bench/prompts/make_copy.py: writes copy.jsonl, the copy-heavy prompt set of `dspark benchmark`.

Each prompt quotes a short Python snippet (written for this set) and asks for it back: verbatim,
with a rename, with a docstring added, with a typo fixed, or finished from its first lines. The
code comes first and the request after it: models/pycoder answers a request placed before the
code with a docstring or a summary instead of the code.

    python3 bench/prompts/make_copy.py
"""
import json
import os

S = {}
S['moving_average'] = '''def moving_average(values, window):
    if window <= 0:
        raise ValueError("window must be positive")
    result = []
    total = 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            result.append(total / window)
    return result
'''
S['parse_config'] = '''def parse_config(path):
    settings = {}
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if "=" not in line:
                raise ValueError(f"line {line_number}: expected key=value")
            key, value = line.split("=", 1)
            settings[key.strip()] = value.strip()
    return settings
'''
S['Stack'] = '''class Stack:
    def __init__(self):
        self._items = []

    def push(self, item):
        self._items.append(item)

    def pop(self):
        if not self._items:
            raise IndexError("pop from an empty stack")
        return self._items.pop()

    def peek(self):
        if not self._items:
            return None
        return self._items[-1]

    def __len__(self):
        return len(self._items)
'''
S['merge_sorted'] = '''def merge_sorted(left, right):
    merged = []
    i = j = 0
    while i < len(left) and j < len(right):
        if left[i] <= right[j]:
            merged.append(left[i])
            i += 1
        else:
            merged.append(right[j])
            j += 1
    merged.extend(left[i:])
    merged.extend(right[j:])
    return merged
'''
S['count_words'] = '''import re
from collections import Counter


def count_words(text, min_length=1):
    words = re.findall(r"[a-z']+", text.lower())
    counts = Counter(word for word in words if len(word) >= min_length)
    return counts.most_common()
'''
S['binary_search'] = '''def binary_search(items, target):
    low = 0
    high = len(items) - 1
    while low <= high:
        middle = (low + high) // 2
        if items[middle] == target:
            return middle
        if items[middle] < target:
            low = middle + 1
        else:
            high = middle - 1
    return -1
'''
S['flatten'] = '''def flatten(nested):
    flat = []
    stack = [iter(nested)]
    while stack:
        try:
            item = next(stack[-1])
        except StopIteration:
            stack.pop()
            continue
        if isinstance(item, (list, tuple)):
            stack.append(iter(item))
        else:
            flat.append(item)
    return flat
'''
S['retry'] = '''import time


def retry(function, attempts=3, delay=1.0):
    last_error = None
    for attempt in range(attempts):
        try:
            return function()
        except Exception as error:
            last_error = error
            if attempt + 1 < attempts:
                time.sleep(delay * (2 ** attempt))
    raise last_error
'''
S['Rectangle'] = '''class Rectangle:
    def __init__(self, width, height):
        self.width = width
        self.height = height

    def area(self):
        return self.width * self.height

    def perimeter(self):
        return 2 * (self.width + self.height)

    def is_square(self):
        return self.width == self.height

    def scale(self, factor):
        return Rectangle(self.width * factor, self.height * factor)
'''
S['group_by'] = '''def group_by(records, key):
    groups = {}
    for record in records:
        value = record.get(key)
        if value not in groups:
            groups[value] = []
        groups[value].append(record)
    return groups


def summarize(groups):
    return {value: len(items) for value, items in groups.items()}
'''
S['read_csv_rows'] = '''import csv


def read_csv_rows(path, required_columns):
    rows = []
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [name for name in required_columns if name not in reader.fieldnames]
        if missing:
            raise KeyError(f"missing columns: {missing}")
        for row in reader:
            rows.append({name: row[name] for name in required_columns})
    return rows
'''
S['LRUCache'] = '''from collections import OrderedDict


class LRUCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.entries = OrderedDict()

    def get(self, key, default=None):
        if key not in self.entries:
            return default
        self.entries.move_to_end(key)
        return self.entries[key]

    def put(self, key, value):
        self.entries[key] = value
        self.entries.move_to_end(key)
        if len(self.entries) > self.capacity:
            self.entries.popitem(last=False)
'''
S['is_palindrome'] = '''def is_palindrome(text):
    cleaned = [char.lower() for char in text if char.isalnum()]
    left = 0
    right = len(cleaned) - 1
    while left < right:
        if cleaned[left] != cleaned[right]:
            return False
        left += 1
        right -= 1
    return True
'''

def block(code):
    return "```python\n" + code + "```"


# (task, snippet, detail): the answer repeats the quoted code, with at most a small edit
TASKS = [
    ("repeat", "moving_average", None),
    ("rename", "moving_average", ("moving_average", "rolling_mean")),
    ("docstring", "parse_config", None),
    ("typo", "parse_config", ("settings[key.strip()] = value.strip()", "setings[key.strip()] = value.strip()")),
    ("repeat", "Stack", None),
    ("rename", "Stack", ("_items", "_elements")),
    ("repeat", "merge_sorted", None),
    ("typo", "merge_sorted", ("merged.extend(right[j:])", "merged.extend(rigth[j:])")),
    ("docstring", "count_words", None),
    ("rename", "count_words", ("count_words", "word_frequencies")),
    ("repeat", "binary_search", None),
    ("rename", "binary_search", ("middle", "mid")),
    ("docstring", "flatten", None),
    ("typo", "flatten", ("stack.append(iter(item))", "stack.apend(iter(item))")),
    ("repeat", "retry", None),
    ("docstring", "retry", None),
    ("repeat", "Rectangle", None),
    ("rename", "Rectangle", ("Rectangle", "Box")),
    ("docstring", "group_by", None),
    ("typo", "group_by", ("groups[value].append(record)", "groups[valeu].append(record)")),
    ("repeat", "read_csv_rows", None),
    ("rename", "read_csv_rows", ("rows", "records")),
    ("repeat", "LRUCache", None),
    ("docstring", "LRUCache", None),
    ("typo", "is_palindrome", ("cleaned[left] != cleaned[right]", "cleaned[left] != cleand[right]")),
    ("repeat", "is_palindrome", None),
]
LEADS = ["Here is my code:", "I wrote this:", "Here is a piece of our code base:"]
ASKS = {
    "repeat": "Please repeat it exactly, in one code block.",
    "docstring": "Please repeat it with a docstring added.",
    "typo": "It has a typo. Please repeat it with the typo fixed.",
}


def main():
    out = []
    for i, (task, name, detail) in enumerate(TASKS):
        code = S[name]
        if task == "typo":
            good, bad = detail
            assert good in code
            code = code.replace(good, bad)
        ask = ASKS.get(task) or f"Please repeat it with `{detail[0]}` renamed to `{detail[1]}`."
        out.append(LEADS[i % len(LEADS)] + "\n\n" + block(code) + "\n\n" + ask)
    # half-written code to finish: the answer repeats the given part, then goes on
    for name in ["moving_average", "LRUCache", "read_csv_rows", "Rectangle"]:
        lines = S[name].rstrip("\n").split("\n")
        part = "\n".join(lines[: max(3, len(lines) * 2 // 3)]) + "\n"
        out.append("Finish this function:\n\n" + block(part))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "copy.jsonl")
    with open(path, "w") as f:
        for turn in out:
            f.write(json.dumps({"turns": [turn]}) + "\n")
    print(f"{path}: {len(out)} prompts")


if __name__ == "__main__":
    main()
