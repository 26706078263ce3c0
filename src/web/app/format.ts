// How times, images and digests read on the page.

export function formatTime(iso: string | undefined): string {
  if (!iso) return '';
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const sameDay = date.toDateString() === new Date().toDateString();
  return sameDay
    ? date.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', second: '2-digit' })
    : date.toLocaleString([], { year: 'numeric', month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit' });
}

/** sha256:0123456789ab… → 0123456789ab */
export const shortDigest = (digest: string): string => digest.replace(/^sha256:/, '').slice(0, 12);

/** registry/team/web@sha256:… → team/web@0123456789ab */
export function shortImage(image: string): string {
  const [name = image, digest] = image.split('@');
  const path = name.includes('/') && /[.:]|^localhost$/.test(name.split('/')[0] ?? '') ? name.slice(name.indexOf('/') + 1) : name;
  return digest ? `${path}@${shortDigest(digest)}` : path;
}

export const plural = (count: number, word: string): string => `${count} ${word}${count === 1 ? '' : 's'}`;
