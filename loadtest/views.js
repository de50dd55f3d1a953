// A crowd reading one product's public lock view (loadtest/views): an open model at RATE
// requests per second for DURATION, every answer checked. Prints k6's summary as JSON.
import http from 'k6/http';
import { check } from 'k6';

export const options = {
  discardResponseBodies: true,
  summaryTrendStats: ['med', 'p(99)', 'max'],
  scenarios: {
    views: {
      executor: 'constant-arrival-rate',
      rate: Number(__ENV.RATE),
      timeUnit: '1s',
      duration: __ENV.DURATION,
      preAllocatedVUs: 200,
      maxVUs: 2000,
    },
  },
};

export default function () {
  const res = http.get(`${__ENV.BASE_URL}${__ENV.VIEW_PATH}`);
  check(res, { '200': (r) => r.status === 200 });
}

export function handleSummary(data) {
  return { stdout: JSON.stringify(data) };
}
