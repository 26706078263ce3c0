import { Type } from '@sinclair/typebox';

// A container image reference: [registry[:port]/]path[:tag][@sha256:digest].
const component = '[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*';
const registryHost = '(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]{1,5})?|\\[[0-9a-fA-F:]+\\](?::[0-9]{1,5})?)';
const tag = '[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}';
/** A tag on its own (a webhook's pushed tag), by the rule of the reference's. */
export const IMAGE_TAG = `^${tag}$`;
export const IMAGE_TAG_RULE = 'a tag: up to 128 letters, digits, "_", "." or "-", not starting with "." or "-"';
const digest = 'sha256:[a-f0-9]{64}';
export const IMAGE_REFERENCE = `^(?:${registryHost}/)?${component}(?:/${component})*(?::${tag})?(?:@${digest})?$`;

export const ImageReference = Type.String({
  pattern: IMAGE_REFERENCE,
  maxLength: 512,
  description: 'an image reference: [registry[:port]/]repository[:tag], lowercase repository path',
  examples: ['127.0.0.1:5000/team/web:v1'],
});
