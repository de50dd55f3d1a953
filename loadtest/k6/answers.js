// What an answer of the service says, read the same way by every k6 script that sends orders
// (seckill.js, bench.js): its body parsed, whether to send the request again, and whether
// Retry-After agrees. Whether to try again is the answer's to say (`retryable`), never a list
// of statuses of our own; a body that is not a JSON object says nothing (not retryable).
//
//   import { answer } from './answers.js';
//   const { body, retryable, retryAfterAgrees } = answer(res);

// `res`, a k6 response whose body was read as text.
export function answer(res) {
  const body = parse(res.body);
  const retryable = body !== null && body.retryable === true;
  return {
    body,
    retryable,
    // Retryable answers carry Retry-After; final ones (a success too) none.
    retryAfterAgrees: retryable === Boolean(res.headers['Retry-After']),
  };
}

// The body as a JSON object, or null (none, not JSON, or JSON but not an object).
function parse(text) {
  try {
    const value = JSON.parse(text);
    return value !== null && typeof value === 'object' && !Array.isArray(value) ? value : null;
  } catch (_) {
    return null;
  }
}
