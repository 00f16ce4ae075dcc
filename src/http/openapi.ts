// Shared OpenAPI helpers: turn a zod registry into `components.schemas`, and the small builders
// for JSON responses, so each API's document is generated from the schemas its handlers use.

import { z } from 'zod';

export function componentsOf(registry: Parameters<typeof z.toJSONSchema>[0]): Record<string, unknown> {
  const { schemas } = z.toJSONSchema(registry as never, { uri: (id: string) => `#/components/schemas/${id}`, unrepresentable: 'any' }) as unknown as {
    schemas: Record<string, Record<string, unknown>>;
  };
  for (const s of Object.values(schemas)) {
    delete s.$schema;
    delete s.$id;
  }
  return schemas;
}

export const schemaRef = (id: string) => ({ $ref: `#/components/schemas/${id}` });
export const jsonResponse = (id: string, description: string) => ({ description, content: { 'application/json': { schema: schemaRef(id) } } });
export const jsonBody = (id: string, required = true) => ({ required, content: { 'application/json': { schema: schemaRef(id) } } });
