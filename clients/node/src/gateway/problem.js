// Problem bodies (RFC 9457), clients/SPEC.md "Gateway behaviour" 6.
export const PROBLEM_TYPE = 'application/problem+json';

export function tooManyRequests(violated, retryAfter) {
  return {
    type: 'https://iana.org/assignments/http-problem-types#quota-exceeded',
    title: 'Too Many Requests',
    status: 429,
    detail: `Rate limit exceeded; retry in ${retryAfter} s.`,
    'violated-policies': violated,
  };
}

export function unavailable(retryAfter) {
  return {
    type: 'about:blank',
    title: 'Service Unavailable',
    status: 503,
    detail: `The rate limiter is unavailable; retry in ${retryAfter} s.`,
  };
}
