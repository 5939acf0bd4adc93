import { test } from "node:test";
import assert from "node:assert/strict";
import { slugify } from "../src/slugify.js";

test("punctuation and case", () => {
  assert.equal(slugify("Hello, World!"), "hello-world");
});

test("runs of separators become one dash", () => {
  assert.equal(slugify("a  --  b"), "a-b");
});
